"""An experiment's configuration: strict YAML, `--set` overrides, the frozen dataclasses of every
section (cluster, policies, workload, classes, SLO), and the checks made before anything runs."""
