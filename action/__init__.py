"""The GitHub Action: ``action.yml`` (composite) runs ``python -m action``.

``python -m action`` reads its inputs from ``INPUT_*`` variables as the runner passes them,
so the same entry point serves a composite action, a container action and a test that runs
it as a runner would. Modes: ``plan`` (JSON plan file, Markdown summary, sticky PR comment),
``apply`` (fails on any refused or failed step) and ``drift`` (fails on drift when
``fail-on-drift`` is true).

Modules: :mod:`action.runner` (inputs, outputs, step summary, workflow commands),
:mod:`action.comment` (the sticky pull-request comment), ``action.__main__`` (the modes).
"""
