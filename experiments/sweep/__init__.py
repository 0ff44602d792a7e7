"""Running a sweep: expanding a config into runs, local process pools or Ray, the results folder
written atomically and locked, honest resume, each run's workload, and the CI regression sweep."""
