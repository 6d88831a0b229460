"""What the SDK read from each model it built or found an engine for (inputs, outputs, opset), kept by
the model's SHA-256 in the engine cache folder. A start with a cached engine hashes the model file and
reads this instead of parsing the model, which needs onnx: importing onnx alone takes about a second on
a small box. A model is recorded only once an engine for it exists, so a failed build leaves the cache
folder as it was."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from edge_sdk.core.model_file import ModelFile, read_model_bytes

log = logging.getLogger(__name__)


class ModelIndex:
    def __init__(self, root: Path):
        self.root = root

    def load(self, path: str | os.PathLike[str]) -> ModelFile:
        """The model at `path`, as `ModelFile.load` reads it, without parsing it when these bytes are
        recorded. An unreadable or malformed record is read again from the model, never trusted."""
        path = Path(path)
        data = read_model_bytes(path)
        return self._recorded(path, hashlib.sha256(data).hexdigest()) or ModelFile.parse(path, data)

    def remember(self, model: ModelFile) -> None:
        """Record `model` (once an engine for it is in the cache); a wrong or unreadable record is replaced."""
        if self._recorded(model.path, model.sha256) == model:
            return
        record = self.root / f"{model.sha256}.json"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.root, suffix=".tmp", delete=False) as file:
                json.dump(model.to_dict(), file)
            os.replace(file.name, record)
        except OSError as error:  # a read-only cache still runs; it just parses every start
            log.debug("cannot record %s in the model index: %s", model.path.name, error)

    def _recorded(self, path: Path, digest: str) -> ModelFile | None:
        record = self.root / f"{digest}.json"
        try:
            known = ModelFile.from_dict(path, json.loads(record.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.debug("model index record %s unusable (%s); reading the model", record, error)
            return None
        return known if known.sha256 == digest else None
