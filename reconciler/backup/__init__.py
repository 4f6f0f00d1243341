"""Data backups and restores: JetStream snapshots in the nats CLI's folder layout.

- :mod:`~reconciler.backup.layout`: the folder (``<folder>/backup.json`` beside
  ``<folder>/stream.tar.s2``, a stream's folder named as the export names its files),
  atomic files, digests, the S2 framing check;
- :mod:`~reconciler.backup.manifest`: ``manifest.json`` (written last) and the checks
  made against it, without a server;
- :mod:`~reconciler.backup.take` and :mod:`~reconciler.backup.restore`: the runs, over
  :mod:`reconciler.jetstream.snapshots` (the only code speaking the wire protocol).

Sits at the level of :mod:`reconciler.execution` (and reuses its approval rule).
"""
