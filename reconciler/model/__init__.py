"""Canonical forms and differences: server facts, defaults, buckets as streams, the diff."""
