"""The jinja environment every page is rendered in: the labels and formatters of analysis/core/labels_zh.py as
filters and globals, StrictUndefined (a placeholder the results cannot fill fails the build), Markdown out."""

from __future__ import annotations

from pathlib import Path

import jinja2

from analysis.core import labels_zh as zh
from analysis.report.build_cache import TemplateCache
from analysis.report.markdown import file_anchor, markdown_table


def make_env(templates_dir: Path, cache: Path | None = None) -> jinja2.Environment:
    """The environment; ``cache``: a folder keeping the compiled templates between builds."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown out, not HTML; values are numbers we format ourselves
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    if cache is not None:
        # what besides a template's source decides its compiled code: jinja's version and the syntax settings
        syntax = [
            getattr(env, k) for k in ("autoescape", "keep_trailing_newline", "trim_blocks", "lstrip_blocks")
        ]
        syntax += [
            env.block_start_string,
            env.variable_start_string,
            env.comment_start_string,
            env.newline_sequence,
        ]
        env.bytecode_cache = TemplateCache(cache, f"jinja {jinja2.__version__} {syntax!r}")
    env.filters.update(
        # numbers
        num=zh.fmt_num,
        approx=zh.fmt_approx,  # a large count after 约
        times=zh.fmt_times,  # a headline ratio: 22 倍, 215 倍, 6.6 倍
        int=zh.fmt_int,
        pct=zh.fmt_pct,
        spct=zh.fmt_signed_pct,
        fpct=zh.fmt_fraction_pct,
        bytes=zh.fmt_bytes,
        seconds=zh.fmt_ms_as_s,  # a duration in ms, shown in seconds
        # a finding, formatted
        value=zh.value_text,
        theory=zh.theory_text,
        error=zh.error_text,
        tolerance=zh.tolerance_text,
        label=zh.finding_label,
        status_zh=zh.status_text,
        reason_zh=zh.reason_text,
        missing_zh=lambda r: zh.MISSING_DATA.get(r, r),
        gate_failed_zh=lambda g: zh.GATE_FAILED.get(g, zh.cell_text("gate", g)),
        # names
        round_zh=zh.round_label,
        engine_zh=lambda e: zh.ENGINES.get(e, e),
        engine_name=zh.engine_name,
        format_zh=zh.format_label,
        column_zh=lambda c: zh.COLUMNS.get(c, c),
        unit_zh=zh.unit_zh,
        verdict_zh=lambda v: zh.VERDICTS.get(v, v),
        ladder_arm_zh=lambda a: zh.LADDER_ARMS.get(a, a),
        # a verdict code -> its sentence (placeholders filled by keyword)
        phrase=zh.phrase,
    )
    env.globals.update(
        markdown_table=markdown_table,
        format_cell=zh.cell_text,
        file_anchor=file_anchor,
        series_label=zh.series_label,
        fmt_value=zh.fmt_value,
        LADDER_ARMS=zh.LADDER_ARMS,
        ENDPOINTS_ZH=zh.ENDPOINTS_ZH,
        SLOT_HISTORIES=zh.SLOT_HISTORIES,
        VALUES=zh.VALUE_LABELS,
        has_data=zh.HAS_DATA,
    )
    return env
