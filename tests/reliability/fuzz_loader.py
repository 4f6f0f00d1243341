"""Coverage-guided fuzzing of the loader and validation with atheris (libFuzzer).

    python tests/reliability/fuzz_loader.py CORPUS_DIR -runs=5000 -max_len=4096

Every input is written to a ``.yaml`` or ``.json`` file and loaded and validated; any
exception other than :class:`~reconciler.errors.SpecError` is a crash (exit status != 0).
Run by ``test_fuzz.py`` when atheris is installed.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from reconciler.errors import SpecError
    from reconciler.specs.loader import load_documents
    from reconciler.specs.validate import validate_documents

FOLDER = tempfile.mkdtemp(prefix="fuzz-loader-")


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    suffix = ".json" if provider.ConsumeBool() else ".yaml"
    path = os.path.join(FOLDER, "input" + suffix)
    with open(path, "wb") as out:
        out.write(provider.ConsumeBytes(provider.remaining_bytes()))
    try:
        validate_documents(load_documents([path]))
    except SpecError as err:
        if not err.problems:
            raise AssertionError("a SpecError without problems") from err


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
