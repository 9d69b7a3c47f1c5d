"""OpenJet: a local terminal coding agent with its own multi-agent inference engine."""

__version__ = "0.1.0"
