"""Magnus (ICWS 2024): generation-length prediction, WMA batching, KNN batch-time estimation,
HRRN batch scheduling and continuous learning; registered as `glp`, `abp` and `magnus`."""
