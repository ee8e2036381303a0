"""Command-line overrides of a jobs config, validated exactly like the file itself.

``orion colocate jobs.json --policy mps`` is how one config is run under every policy; the
override goes through the same validator as the file, so a policy that needs an HP client or a
negative duration is reported in the same ``field.path: message`` form.

A setting whose default depends on the policy (``run.sharing``, and ``run.be_graph_gate``, which
follows the sharing) keeps what the file wrote and nothing more: left unset in the file, it is
left unset for the new policy too, which then runs with its own default. Starting from the
resolved values instead would carry the file's policy's defaults over (orion's ``timeslice``
refused under ``--policy mps``, and reef run time-sliced where reef in a file runs under MPS).
"""

from __future__ import annotations

from pathlib import Path

from colocation.config import JobsConfig, parse_jobs


def with_overrides(
    config: JobsConfig,
    *,
    source: Path,
    policy: str | None = None,
    output_dir: Path | None = None,
    duration_s: float | None = None,
) -> JobsConfig:
    """``config`` with run settings replaced; ``duration_s`` also drops ``run.requests``."""
    if policy is None and output_dir is None and duration_s is None:
        return config
    # model_dump, not to_json_dict: what the file set, without the policy's resolved defaults
    data = config.model_dump(mode="json")
    if policy is not None:
        data["run"]["policy"] = policy
    if output_dir is not None:
        data["run"]["output_dir"] = str(Path(output_dir).absolute())
    if duration_s is not None:
        data["run"]["duration_s"] = duration_s
        data["run"]["requests"] = None
    return parse_jobs(data, source.parent, source=f"jobs file {source} with command-line overrides")
