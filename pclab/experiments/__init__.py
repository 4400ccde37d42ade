"""The lab's real experiments, one package each; see experiments/README.md and registry.py."""
