//! The control language: one command per line, one reply line per command.
//!
//! ```text
//! set <dir> key=value ...   change settings live (keys as in the config file)
//! down [dir]                take a direction (default: both) down
//! up [dir]                  bring it back up
//! stats                     JSON counters per direction
//! show                      JSON of the current settings per direction
//! help                      this list
//! ```
//! `<dir>` is `a2b`, `b2a` or `both`; `up`/`down` are accepted as aliases of `a2b`/`b2a`
//! after `set` (A is usually the client side, so its egress is the uplink).
//! Replies are `ok`, `error: …`, or a single JSON line. Parsing is pure; executing lives in
//! the server, which owns the running link.

use crate::config::{ConfigError, DirectionPatch};
use crate::delay::JitterDist;
use crate::pipeline::DirectionParams;
use crate::rate::RateModel;
use serde_json::{json, Value};

/// Errors from parsing a control line.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Empty line or unknown verb.
    #[error("unknown command {0:?} (try help)")]
    UnknownCommand(String),
    /// The direction word is not a2b, b2a or both.
    #[error("unknown direction {0:?} (a2b, b2a or both)")]
    UnknownDirection(String),
    /// `set` without any key=value.
    #[error("set needs a direction and at least one key=value")]
    NothingToSet,
    /// A setting is malformed.
    #[error(transparent)]
    Setting(#[from] ConfigError),
}

/// Which direction(s) a command acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Frames entering on interface A.
    A2b,
    /// Frames entering on interface B.
    B2a,
    /// Both.
    Both,
}

impl Dir {
    /// Whether this selects direction index `i` (0 = a2b, 1 = b2a).
    pub fn selects(self, i: usize) -> bool {
        matches!((self, i), (Dir::Both, _) | (Dir::A2b, 0) | (Dir::B2a, 1))
    }

    fn parse(word: &str, aliases: bool) -> Result<Dir, ControlError> {
        match word {
            "a2b" => Ok(Dir::A2b),
            "b2a" => Ok(Dir::B2a),
            "both" => Ok(Dir::Both),
            "up" if aliases => Ok(Dir::A2b),
            "down" if aliases => Ok(Dir::B2a),
            _ => Err(ControlError::UnknownDirection(word.to_owned())),
        }
    }
}

/// A parsed control command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Change settings.
    Set(Dir, DirectionPatch),
    /// Take down.
    Down(Dir),
    /// Bring up.
    Up(Dir),
    /// Report counters.
    Stats,
    /// Report settings.
    Show,
    /// List commands.
    Help,
}

/// The reply to `help`.
pub const HELP: &str = "commands: set <a2b|b2a|both> key=value... (rate delay jitter jitter_dist \
reorder loss queue_bytes queue_packets) | down [dir] | up [dir] | stats | show | help";

/// Parses one line.
pub fn parse(line: &str) -> Result<Command, ControlError> {
    let mut words = line.split_whitespace();
    let verb = words.next().unwrap_or("");
    let dir_or_both = |w: Option<&str>| w.map_or(Ok(Dir::Both), |w| Dir::parse(w, false));
    match verb {
        "set" => {
            let dir = Dir::parse(words.next().ok_or(ControlError::NothingToSet)?, true)?;
            let mut patch = DirectionPatch::default();
            let mut any = false;
            for kv in words {
                patch.set(kv)?;
                any = true;
            }
            if !any {
                return Err(ControlError::NothingToSet);
            }
            Ok(Command::Set(dir, patch))
        }
        "down" => Ok(Command::Down(dir_or_both(words.next())?)),
        "up" => Ok(Command::Up(dir_or_both(words.next())?)),
        "stats" => Ok(Command::Stats),
        "show" => Ok(Command::Show),
        "help" => Ok(Command::Help),
        _ => Err(ControlError::UnknownCommand(line.trim().to_owned())),
    }
}

/// The settings of one direction as JSON, in config-file spelling.
pub fn describe(p: &DirectionParams, down: bool) -> Value {
    let rate = match &p.rate {
        RateModel::Unlimited => json!("unlimited"),
        RateModel::Constant(b) => json!(b.to_string()),
        RateModel::Trace(t) => json!({
            "trace_opportunities": t.millis().len(),
            "trace_period_ms": t.period().as_millis() as u64,
            "trace_mean_bit_per_s": t.mean_bits_per_sec().round(),
        }),
    };
    json!({
        "rate": rate,
        "delay_us": p.delay.delay.as_micros() as u64,
        "jitter_us": p.delay.jitter.as_micros() as u64,
        "jitter_dist": match p.delay.dist { JitterDist::Uniform => "uniform", JitterDist::Normal => "normal" },
        "reorder": p.delay.reorder,
        "loss": p.loss.map(|l| l.to_string()),
        "queue_bytes": p.queue.bytes,
        "queue_packets": p.queue.packets,
        "outages_s": p.outages.windows().iter()
            .map(|w| [w.start.as_secs_f64(), w.end.as_secs_f64()]).collect::<Vec<_>>(),
        "down": down,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Bandwidth;

    #[test]
    fn parses_commands() {
        assert_eq!(parse("down").unwrap(), Command::Down(Dir::Both));
        assert_eq!(parse("up b2a").unwrap(), Command::Up(Dir::B2a));
        assert_eq!(parse("  stats ").unwrap(), Command::Stats);
        match parse("set up rate=20mbit delay=5ms").unwrap() {
            Command::Set(Dir::A2b, p) => {
                assert_eq!(
                    p.rate,
                    Some(crate::config::RateSpec::Constant(
                        Bandwidth::from_bits_per_sec(20_000_000).unwrap()
                    ))
                );
                assert!(p.delay.is_some());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("set down loss=0.01").unwrap(),
            Command::Set(Dir::B2a, _)
        ));
        assert!(matches!(parse("set both"), Err(ControlError::NothingToSet)));
        assert!(matches!(
            parse("set sideways rate=1mbit"),
            Err(ControlError::UnknownDirection(_))
        ));
        assert!(matches!(
            parse("down up"),
            Err(ControlError::UnknownDirection(_))
        ));
        assert!(matches!(
            parse("set a2b rate=fast"),
            Err(ControlError::Setting(_))
        ));
        assert!(matches!(
            parse("reboot"),
            Err(ControlError::UnknownCommand(_))
        ));
        assert!(matches!(parse(""), Err(ControlError::UnknownCommand(_))));
    }

    #[test]
    fn describes_settings() {
        let v = describe(&DirectionParams::default(), false);
        assert_eq!(v["rate"], "unlimited");
        assert_eq!(v["queue_packets"], 1000);
        assert_eq!(v["loss"], Value::Null);
    }
}
