"""Fleet-wide drift on Apache Spark: the only package that imports pyspark.

``reconcile fleet drift`` runs :func:`reconciler.fleet.job.fleet_drift`. Modules:
``session`` (the SparkSession: local by default, a standalone master on request),
``lines`` (which task reads which file, and the lines it reads), ``records`` (snapshot
JSON Lines → rows, bad lines with FILE:LINE), ``desired`` (spec
folders → desired rows, on the driver), ``match`` and ``verdict`` (matching and the
plan's rules, on the workers), ``canonical`` (the engine's normalise/diff per row),
``summary`` and ``report`` (summary.json and the html page). See ``docs/fleet.md``.
"""
