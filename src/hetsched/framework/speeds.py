"""The profile's ``speeds`` section: the throughput table that ``job_type`` names resolve in.

```yaml
speeds:
  table: simulation_throughputs.json   # Gavel's format; relative to the profile file
  models: {k80: K80-12G}                # table worker type -> device model (optional)
  job_types:                            # inline rates of the 1-device job (over the table)
    bert-large: {A100: 3.1, V100: 1.0, T4: 0.35}
```

Reading the table file is the boundary's business (``load_profile``, the drivers): the core
is handed a built :class:`~hetsched.model.speed.SpeedTable` and never opens a file.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from hetsched.model.specs import parse_speed_map
from hetsched.model.speed import SpeedError, SpeedTable

__all__ = ["SpeedsSpec", "check_speeds", "load_speed_table", "read_gavel_table"]


#: device model -> rate, validated as a job's ``speed`` map is
_Rates = Annotated[dict[str, float], BeforeValidator(parse_speed_map)]


class SpeedsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: a throughput table in Gavel's ``simulation_throughputs.json`` format
    table: str | None = Field(default=None, min_length=1)
    #: table worker type -> device model, where the names differ beyond letter case
    models: dict[str, str] = Field(default_factory=dict)
    #: job type -> device model -> rate of the 1-device job (larger jobs scale linearly)
    job_types: dict[str, _Rates] = Field(default_factory=dict)


@functools.lru_cache(maxsize=8)
def _read_json(path: str, _mtime_ns: int) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def read_gavel_table(path: str | Path, models: dict[str, str] | None = None) -> SpeedTable:
    """A :class:`SpeedTable` from Gavel's ``simulation_throughputs.json``; raises
    SpeedError (unreadable, not JSON, not the format)."""
    where = Path(path)
    try:
        raw = _read_json(str(where.resolve()), where.stat().st_mtime_ns)
    except OSError as exc:
        raise SpeedError(f"{path}: cannot read: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpeedError(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SpeedError(f"{path}: expected an object of worker types")
    table = SpeedTable.from_gavel(raw, models)
    if not len(table):
        raise SpeedError(f"{path}: no job type with a positive isolated throughput")
    return table


def load_speed_table(spec: SpeedsSpec, base: Path | None = None) -> SpeedTable | None:
    """The table of a profile's ``speeds`` section (inline types over the file's), or None
    when the section is empty. ``base`` is the folder a relative ``table`` path is in."""
    inline = SpeedTable.of(spec.job_types)
    if spec.table is None:
        return inline if len(inline) else None
    path = Path(spec.table)
    if base is not None and not path.is_absolute():
        path = base / path
    return read_gavel_table(path, spec.models).merged(inline)


def check_speeds(spec: SpeedsSpec, base: Path | None = None) -> list[str]:
    """Every problem of the ``speeds`` section, with field paths."""
    try:
        load_speed_table(spec, base)
    except SpeedError as exc:
        field = "speeds.table" if spec.table is not None else "speeds.job_types"
        return [f"{field}: {exc}"]
    return []
