"""How a pipeline file names a source."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(
        description=(
            "Where frames come from: a video path or file://PATH, images://FOLDER, "
            "synthetic://?image=PATH&frames=N&size=WxH&fps=F. Relative paths are relative to the pipeline file."
        )
    )
    name: str | None = Field(None, description="Name in results; defaults to the file or folder name.")
    loop: bool = Field(False, description="Start again at the end (files and folders).")
    max_frames: int | None = Field(None, ge=1, description="Stop after this many frames.")
