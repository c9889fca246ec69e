//! Random loss: Bernoulli and Gilbert-Elliott, decided once per frame.
//!
//! Gilbert-Elliott is the two-state Markov chain used for bursty wireless loss: per frame the
//! chain first moves (Good→Bad with probability `p`, Bad→Good with `r`), then the frame is lost
//! with `loss_bad` in Bad and `loss_good` in Good. Stationary P(Bad) = p/(p+r), so the long-run
//! loss rate is (p·loss_bad + r·loss_good)/(p+r) and the mean burst (Bad sojourn) is 1/r frames.
//! Invariant: every probability is in [0, 1] (checked when a [`LossSpec`] is built or parsed);
//! the model consumes randomness only from the RNG it is handed, so runs are reproducible.

use rand::Rng;
use serde::Deserialize;
use std::fmt;
use std::str::FromStr;

/// Errors from building or parsing a loss specification.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LossError {
    /// A probability is outside [0, 1] or not a number.
    #[error("probability {name} = {value} is not in [0, 1]")]
    Probability {
        /// Which parameter.
        name: &'static str,
        /// The offending value.
        value: f64,
    },
    /// The text is neither a probability nor `ge:p,r,loss_bad,loss_good`.
    #[error("bad loss {0:?}: expected 0.01 or ge:p,r,loss_bad,loss_good")]
    Syntax(String),
}

/// Parameters of a Gilbert-Elliott channel.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// P(Good → Bad) per frame.
    pub p: f64,
    /// P(Bad → Good) per frame.
    pub r: f64,
    /// Loss probability while Bad (1 − h in the literature).
    #[serde(default = "one")]
    pub loss_bad: f64,
    /// Loss probability while Good (1 − k in the literature).
    #[serde(default)]
    pub loss_good: f64,
}

fn one() -> f64 {
    1.0
}

impl GilbertElliott {
    /// Long-run fraction of frames lost.
    pub fn mean_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            // The chain never leaves Good (the initial state).
            return self.loss_good;
        }
        (self.p * self.loss_bad + self.r * self.loss_good) / (self.p + self.r)
    }
}

/// What loss a direction applies.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged, try_from = "LossSpecRepr")]
pub enum LossSpec {
    /// Independent loss with this probability.
    Bernoulli(f64),
    /// Bursty loss.
    GilbertElliott(GilbertElliott),
}

/// The forms a loss may take in TOML: a number, a table, or the control-command string.
#[derive(Deserialize)]
#[serde(untagged)]
enum LossSpecRepr {
    Number(f64),
    Table(GilbertElliott),
    Text(String),
}

impl TryFrom<LossSpecRepr> for LossSpec {
    type Error = LossError;
    fn try_from(r: LossSpecRepr) -> Result<Self, LossError> {
        let spec = match r {
            LossSpecRepr::Number(p) => LossSpec::Bernoulli(p),
            LossSpecRepr::Table(ge) => LossSpec::GilbertElliott(ge),
            LossSpecRepr::Text(s) => return s.parse(),
        };
        spec.validate()
    }
}

impl LossSpec {
    /// Checks every probability is in [0, 1].
    pub fn validate(self) -> Result<Self, LossError> {
        let check = |name, value: f64| {
            if (0.0..=1.0).contains(&value) {
                Ok(())
            } else {
                Err(LossError::Probability { name, value })
            }
        };
        match self {
            LossSpec::Bernoulli(p) => check("loss", p)?,
            LossSpec::GilbertElliott(g) => {
                check("p", g.p)?;
                check("r", g.r)?;
                check("loss_bad", g.loss_bad)?;
                check("loss_good", g.loss_good)?;
            }
        }
        Ok(self)
    }
}

impl FromStr for LossSpec {
    type Err = LossError;
    fn from_str(s: &str) -> Result<Self, LossError> {
        let s = s.trim();
        let num = |t: &str| {
            t.trim()
                .parse::<f64>()
                .map_err(|_| LossError::Syntax(s.into()))
        };
        let spec = if let Some(rest) = s.strip_prefix("ge:") {
            let v = rest.split(',').map(num).collect::<Result<Vec<_>, _>>()?;
            let [p, r, loss_bad, loss_good] = v[..] else {
                return Err(LossError::Syntax(s.into()));
            };
            LossSpec::GilbertElliott(GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            })
        } else {
            LossSpec::Bernoulli(num(s)?)
        };
        spec.validate()
    }
}

impl fmt::Display for LossSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossSpec::Bernoulli(p) => write!(f, "{p}"),
            LossSpec::GilbertElliott(g) => {
                write!(f, "ge:{},{},{},{}", g.p, g.r, g.loss_bad, g.loss_good)
            }
        }
    }
}

/// The running loss process of one direction.
#[derive(Debug, Clone)]
pub struct LossModel {
    spec: Option<LossSpec>,
    /// Gilbert-Elliott state; starts Good, and survives a change of parameters so a live
    /// change does not reset an ongoing burst.
    bad: bool,
}

impl LossModel {
    /// A model applying `spec` (`None`: never lose).
    pub fn new(spec: Option<LossSpec>) -> LossModel {
        LossModel { spec, bad: false }
    }

    /// Replaces the parameters, keeping the channel state.
    pub fn set(&mut self, spec: Option<LossSpec>) {
        self.spec = spec;
    }

    /// The current parameters.
    pub fn spec(&self) -> Option<LossSpec> {
        self.spec
    }

    /// Decides the fate of one frame: `true` means drop it.
    pub fn should_drop<R: Rng>(&mut self, rng: &mut R) -> bool {
        match self.spec {
            None => false,
            Some(LossSpec::Bernoulli(p)) => p > 0.0 && rng.gen_bool(p),
            Some(LossSpec::GilbertElliott(g)) => {
                let flip = if self.bad { g.r } else { g.p };
                if rng.gen_bool(flip) {
                    self.bad = !self.bad;
                }
                let p = if self.bad { g.loss_bad } else { g.loss_good };
                rng.gen_bool(p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn loss_rate(spec: LossSpec, n: usize, seed: u64) -> (f64, f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut m = LossModel::new(Some(spec));
        let (mut lost, mut bursts) = (0usize, 0usize);
        let mut prev = false;
        for _ in 0..n {
            let d = m.should_drop(&mut rng);
            lost += usize::from(d);
            bursts += usize::from(d && !prev);
            prev = d;
        }
        (lost as f64 / n as f64, lost as f64 / bursts.max(1) as f64)
    }

    #[test]
    fn parses_all_forms() {
        assert_eq!(
            "0.01".parse::<LossSpec>().unwrap(),
            LossSpec::Bernoulli(0.01)
        );
        let ge = "ge:0.01,0.3,1,0".parse::<LossSpec>().unwrap();
        assert_eq!(
            ge,
            LossSpec::GilbertElliott(GilbertElliott {
                p: 0.01,
                r: 0.3,
                loss_bad: 1.0,
                loss_good: 0.0
            })
        );
        assert_eq!(ge.to_string().parse::<LossSpec>().unwrap(), ge);
        assert!("1.5".parse::<LossSpec>().is_err());
        assert!("ge:0.1,0.2".parse::<LossSpec>().is_err());
        assert!("lots".parse::<LossSpec>().is_err());
    }

    #[test]
    fn toml_forms() {
        #[derive(Deserialize)]
        struct T {
            loss: LossSpec,
        }
        let t: T = toml::from_str("loss = 0.02").unwrap();
        assert_eq!(t.loss, LossSpec::Bernoulli(0.02));
        let t: T = toml::from_str("loss = { p = 0.05, r = 0.5 }").unwrap();
        assert_eq!(
            t.loss,
            LossSpec::GilbertElliott(GilbertElliott {
                p: 0.05,
                r: 0.5,
                loss_bad: 1.0,
                loss_good: 0.0
            })
        );
        assert!(toml::from_str::<T>("loss = 2.0").is_err());
    }

    #[test]
    fn bernoulli_long_run() {
        let (rate, _) = loss_rate(LossSpec::Bernoulli(0.05), 200_000, 7);
        assert!((rate - 0.05).abs() < 0.003, "{rate}");
    }

    #[test]
    fn gilbert_elliott_is_bursty() {
        let g = GilbertElliott {
            p: 0.01,
            r: 0.25,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        let (rate, mean_burst) = loss_rate(LossSpec::GilbertElliott(g), 400_000, 3);
        assert!(
            (rate - g.mean_loss()).abs() < 0.004,
            "{rate} vs {}",
            g.mean_loss()
        );
        // Bad sojourns are geometric with mean 1/r = 4 frames.
        assert!((mean_burst - 4.0).abs() < 0.3, "{mean_burst}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn gilbert_elliott_long_run_matches_parameters(
            p in 0.005f64..0.2, r in 0.05f64..0.9, lb in 0.3f64..1.0, lg in 0.0f64..0.05,
            seed in any::<u64>(),
        ) {
            let g = GilbertElliott { p, r, loss_bad: lb, loss_good: lg };
            let (rate, _) = loss_rate(LossSpec::GilbertElliott(g), 300_000, seed);
            // Tolerance from the chain's mixing: bursts of mean 1/r frames make samples
            // correlated, so allow a few standard errors of a sample of 300k/(1/r) bursts.
            let tol = 0.004 + 4.0 * (g.mean_loss() / (300_000.0 * r)).sqrt();
            prop_assert!((rate - g.mean_loss()).abs() < tol, "{} vs {}", rate, g.mean_loss());
        }
    }
}
