"""Choose the preset once for a Dagster instance: every door (the driver, the web UI, `dagster
asset materialize`, `dg launch`, the schedules) then resolves it (dihal.run.profiles.resolve_preset)
unless one names another.

    python -m pipeline.preset              # the preset in force, and where it comes from
    python -m pipeline.preset tiny         # choose tiny for $DAGSTER_HOME's instance
    python -m pipeline.preset my.json      # a file of stage -> {field: value} (absolute path kept)
    python -m pipeline.preset --clear      # back to the project's choice (dihal.toml), else cpu

A web UI or daemon already running reads the choice when its code location is reloaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def choose(name: str) -> Path:
    """Check `name` (resolve_preset) and write it to $DAGSTER_HOME/dihal-preset atomically."""
    from dihal.run.profiles import instance_file, resolve_preset

    path = instance_file()
    if path is None:
        raise ValueError("DAGSTER_HOME is not set: the preset is chosen for the instance under "
                         "it (`. ./env.sh` sets it), or put `preset = \"...\"` in dihal.toml")
    if name.endswith(".json"):
        name = str(Path(name).expanduser().resolve())
    resolve_preset(name, source="the command line")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"# chosen by python -m pipeline.preset\n{name}\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    from dihal.run.profiles import instance_file, resolve_preset

    ap = argparse.ArgumentParser(prog="python -m pipeline.preset", description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("name", nargs="?", help="cpu | gpu | gpu-smollm2 | tiny | a .json file")
    ap.add_argument("--clear", action="store_true", help="forget the instance's choice")
    args = ap.parse_args(argv)
    try:
        if args.clear and (f := instance_file()) is not None:
            f.unlink(missing_ok=True)
        elif args.name:
            print(f"chose {args.name} for this instance ({choose(args.name)})")
        preset = resolve_preset()
    except ValueError as exc:
        ap.error(str(exc))
    print(f"preset {preset.name} (label {preset.label}), from {preset.source}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
