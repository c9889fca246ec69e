"""Small programs the lab runs inside namespaces (``python -m lab.tools.NAME``).

Each prints one JSON object on stdout when it finishes, so the orchestrating process can parse
the outcome from the log file; progress goes to stderr.
"""
