"""Where a finding belongs, and the one place that names things: slugs, series ids and finding keys.

A finding is addressed by structured fields (`At`): the campaign, the round, the engine and weight format, the
run, the cross-campaign series, the topic (the reconciliation it comes from: ``overload``, ``gates`` …) and
the metric. Readers select findings by these fields; the key is only an id (the findings.json key, an HTML
anchor) that this module composes from them. Nothing parses a key back into fields.

Key layout, for a reader of findings.json (the fields in this order, empty ones left out)::

    [comparison.<campaign>[__vs__<campaign>].] [<round>.] [runs.<run>.] [<topic>.] [<series>.] [<engine>.]
    [<test>.] [<format>_over_<format>.] <metric>

``level`` says which scope names the finding: the campaign (or its round), one engine, one run (our own
campaigns), or one series (the cross-campaign comparison). Fields outside that scope still describe the
finding (an engine-level finding knows its weight format; a round's overload finding knows its run) but do
not enter the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

LEVELS = ("campaign", "engine", "run", "series")
_SLUG = re.compile(r"[^a-z0-9]+")
_SEGMENT = re.compile(r"^[a-z0-9_]+$")


def slug(text: object) -> str:
    """A name as a key segment: lower case, every run of other characters one ``_``:
    ``rtx4090-qwen2.5-7b`` → ``rtx4090_qwen2_5_7b``, ``llamacpp-q4km`` → ``llamacpp_q4km``."""
    return _SLUG.sub("_", str(text).lower()).strip("_")


def series_id(engine: str, weight_format: str | None) -> str:
    """A series across campaigns: engine and weight format (``llamacpp_q4_k_m``; ``…_unknown`` without
    one)."""
    return slug(f"{engine}_{weight_format or 'unknown'}")


@dataclass(frozen=True)
class At:
    """The structured address of a finding. Build one per scope and call it with each metric:
    ``at = At(round="round2", engine="vllm", level="engine")`` then ``at("knee_concurrency")``."""

    metric: str = ""
    topic: str | None = None
    level: str = "campaign"
    campaign: str | None = None
    versus: str | None = None  # the second campaign of a cross-campaign pair
    cross: bool = False  # a finding of the cross-campaign comparison (comparison.json)
    round: str | None = None
    engine: str | None = None
    weight_format: str | None = None
    run: str | None = None
    series: str | None = None
    test: str | None = None
    formats: tuple[str, ...] = ()  # a ratio between weight formats: (heavier, lighter)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"finding level {self.level!r} not in {LEVELS}")
        need = {"engine": self.engine, "run": self.run, "series": self.series}.get(self.level, "")
        if need is None:
            raise ValueError(f"a finding at level {self.level!r} needs its {self.level}")
        if self.series is None and self.engine and self.weight_format:
            object.__setattr__(self, "series", series_id(self.engine, self.weight_format))
        if isinstance(self.formats, list):
            object.__setattr__(self, "formats", tuple(self.formats))

    def __call__(self, metric: str, **changes: Any) -> At:
        """This scope with a metric (and any field changed)."""
        return replace(self, metric=metric, **changes)

    def with_(self, **changes: Any) -> At:
        return replace(self, **changes)

    @property
    def key(self) -> str:
        """The finding's id (see the module docstring for the layout)."""
        if not self.metric:
            raise ValueError("a finding address needs a metric")
        parts = [*self._scope_parts(), *self._subject_parts(), self.metric]
        for p in parts:
            if not _SEGMENT.match(p):
                raise ValueError(f"finding key segment {p!r} of {'.'.join(parts)} is not snake_case")
        return ".".join(parts)

    def _scope_parts(self) -> list[str]:
        """Where the finding sits: the comparison pair, the round, the run."""
        parts: list[str] = []
        if self.cross:
            if not self.campaign:
                raise ValueError(f"cross-campaign finding {self.metric!r} names no campaign")
            pair = slug(self.campaign) + (f"__vs__{slug(self.versus)}" if self.versus else "")
            parts += ["comparison", pair]
        if self.round:
            parts.append(self.round)
        if self.level == "run":
            parts += ["runs", slug(self.run) or "run"]
        return parts

    def _subject_parts(self) -> list[str]:
        """What it is about: the topic, the series or engine, the test, the formats compared."""
        parts: list[str] = []
        if self.topic:
            parts.append(self.topic)
        if self.level == "series":
            parts.append(str(self.series))
        if self.level == "engine":
            parts.append(str(self.engine))
        if self.test:
            parts.append(slug(self.test))
        if self.formats:
            parts.append("_over_".join(self.formats))
        return parts

    def to_json(self) -> dict[str, Any]:
        """The fields as findings.json writes them beside the value (defaults left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v != f.default:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        out["metric"] = self.metric
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> At:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in obj.items() if k in names}
        if "formats" in kw:
            kw["formats"] = tuple(kw["formats"] or ())
        return cls(**kw)


ADDRESS_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(At))


def matches(at: At, query: dict[str, Any]) -> bool:
    """Every queried field equal (a list or tuple: one of them); fields not queried are free — except
    ``topic``, which always counts (None: no topic), since the same metric name can live under two topics."""
    if "topic" not in query and at.topic is not None:
        return False
    for k, want in query.items():
        have = getattr(at, k)
        if isinstance(want, list | set) and k != "formats":
            if have not in want:
                return False
        elif have != want:
            return False
    return True
