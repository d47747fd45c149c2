"""What each request of a point sends: its prompt (token ids or text), its output length, its prefix and its
place in a conversation — pure, seeded functions, one per distribution and per prompt source.

Names and meanings follow the peers where they agree (``vllm bench serve``, AIPerf, GuideLLM):

- lengths: ``fixed`` (the point's ``input_len``/``output_len``); ``uniform`` with a ``range_ratio`` r:
  integers uniform on [floor(L·(1−r)), ceil(L·(1+r))] (vllm bench's ``--random-range-ratio``); ``normal``
  with a ``stddev`` σ: round(N(L, σ)) clipped to [max(1, L−3σ), L+3σ] (AIPerf's
  ``--synthetic-input-tokens-stddev``; the clip makes the longest prompt known before the run, so pre-flight
  can check it fits);
- shared prefix: ``prefix_len`` tokens before each prompt, one of ``num_prefixes`` distinct prefixes (request
  i takes prefix i mod num_prefixes); the prompt is prefix + ``input_len`` tokens (vllm bench's
  ``--random-prefix-len``, AIPerf's ``--prefix-prompt-length`` / ``--num-prefix-prompts``);
- multi-turn: ``turns`` requests per conversation, each turn sending every earlier turn's user text and the
  assistant's streamed reply before its own text, after a think time of ``turn_delay_ms`` (AIPerf's
  ``--conversation-turn-mean`` / ``--conversation-turn-delay-mean``, GuideLLM's ``turns``);
- dataset: a local ShareGPT JSON (``[{"conversations": [{"from": "human", "value": …}, …]}]``), a JSONL
  file of ``{"prompt"|"text"|"conversations"|"messages": …}`` objects, or a Hugging Face ``datasets`` file on
  disk (``.parquet`` / ``.arrow``; needs pyarrow, an optional extra). Entries are taken in a seeded shuffle,
  cycled when a point needs more than the file has (vllm bench shuffles ShareGPT with its seed);
- dataset output lengths (``[workload] output_len = "dataset"``): each request's ``max_tokens`` is the token
  count of its entry's reply (the turn after the prompt), as ``vllm bench serve``'s ShareGPT dataset does when
  ``--sharegpt-output-len`` is not given (``len(tokenizer(completion).input_ids)``); entries without a reply
  are left out, as vllm leaves out conversations of fewer than two turns. vllm's further filter (prompts of 4
  to 1,024 tokens, prompt + output ≤ 2,048) is not applied: pre-flight checks the longest against the
  context instead.

Every seeded draw uses ``numpy.random.default_rng([seed, STREAM])`` with its own stream number, so adding a
distribution never changes the prompts; fixed-length random prompts keep ``default_rng(seed)`` exactly as
before (older runs replay).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from collector.raw.errors import PlanError
from collector.raw.plan import Plan

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# seed streams (numpy SeedSequence entropy [seed, STREAM]): one per kind of draw
_INPUT_LEN, _OUTPUT_LEN, _PREFIX, _DATASET, _VARIABLE_IDS = 1, 2, 3, 4, 5


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map (byte-level BPE alphabet): how byte-level
    BPE vocabularies spell single bytes (collector.protocol.init reads a served vocabulary with it,
    lab.modelgen
    writes one)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


# ------------------------------------------------------------------------------------------ lengths


def fixed_lengths(n: int, length: int) -> list[int]:
    """``n`` times ``length``."""
    return [length] * n


def uniform_bounds(length: int, range_ratio: float) -> tuple[int, int]:
    """The range of ``uniform_lengths``: [floor(L·(1−r)), ceil(L·(1+r))], at least 1."""
    low = max(1, math.floor(length * (1 - range_ratio)))
    return low, max(low, math.ceil(length * (1 + range_ratio)))


def uniform_lengths(n: int, length: int, range_ratio: float, seed: int, stream: int) -> list[int]:
    """Integers uniform on ``uniform_bounds`` (vllm bench's ``--random-range-ratio``)."""
    low, high = uniform_bounds(length, range_ratio)
    rng = np.random.default_rng([seed, stream])
    return [int(x) for x in rng.integers(low, high + 1, size=n)]


def normal_bounds(length: int, stddev: float) -> tuple[int, int]:
    """The clip of ``normal_lengths``: [max(1, L−3σ), L+3σ], rounded outwards to integers."""
    return max(1, math.floor(length - 3 * stddev)), math.ceil(length + 3 * stddev)


def normal_lengths(n: int, length: int, stddev: float, seed: int, stream: int) -> list[int]:
    """round(N(L, σ)) clipped to ``normal_bounds`` (AIPerf's ``--synthetic-input-tokens-stddev``)."""
    low, high = normal_bounds(length, stddev)
    rng = np.random.default_rng([seed, stream])
    return [int(x) for x in np.clip(np.rint(rng.normal(length, stddev, size=n)), low, high)]


def lengths(n: int, length: int, range_ratio: float, stddev: float, seed: int, stream: int) -> list[int]:
    """The one place a length distribution is chosen: normal when ``stddev`` > 0, uniform when
    ``range_ratio`` > 0, else fixed (a plan sets at most one of the two)."""
    if stddev > 0:
        return normal_lengths(n, length, stddev, seed, stream)
    if range_ratio > 0:
        return uniform_lengths(n, length, range_ratio, seed, stream)
    return fixed_lengths(n, length)


def max_length(length: int, range_ratio: float, stddev: float) -> int:
    """The longest length ``lengths`` can draw (what pre-flight checks against the context)."""
    if stddev > 0:
        return normal_bounds(length, stddev)[1]
    if range_ratio > 0:
        return uniform_bounds(length, range_ratio)[1]
    return length


# ------------------------------------------------------------------------------------- random prompts


def prompt_token_ids(seed: int, n_requests: int, input_len: int, low: int, high: int) -> list[list[int]]:
    """``n_requests`` prompts of ``input_len`` ids, uniform on [low, high), from
    ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, size=(n_requests, input_len), dtype=np.int64).tolist()


def variable_token_ids(seed: int, lens: Sequence[int], low: int, high: int) -> list[list[int]]:
    """One prompt of ``lens[i]`` ids per request, uniform on [low, high), from its own seed stream."""
    rng = np.random.default_rng([seed, _VARIABLE_IDS])
    return [rng.integers(low, high, size=n, dtype=np.int64).tolist() for n in lens]


def prefix_token_ids(seed: int, num_prefixes: int, prefix_len: int, low: int, high: int) -> list[list[int]]:
    """``num_prefixes`` distinct prefixes of ``prefix_len`` ids, uniform on [low, high)."""
    rng = np.random.default_rng([seed, _PREFIX])
    return rng.integers(low, high, size=(num_prefixes, prefix_len), dtype=np.int64).tolist()


# ---------------------------------------------------------------------------------------------- datasets


_USER_ROLES = ("human", "user")


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset entry: its prompt (the first user turn) and the reply after it (None when it has none)."""

    prompt: str
    reply: str | None = None


def _entry(obj: Any, where: str) -> DatasetEntry:
    """One dataset entry: ShareGPT ``conversations`` (first ``human``/``user`` value, then the next turn's
    value if it is not a user's), OpenAI ``messages`` (first ``user`` content, then the next ``assistant``
    content), or a ``prompt`` / ``text`` string (with a ``completion`` / ``response`` string as the reply)."""
    if isinstance(obj, dict):
        conv = obj.get("conversations")
        if isinstance(conv, list):
            for k, turn in enumerate(conv):
                if isinstance(turn, dict) and turn.get("from") in _USER_ROLES:
                    if isinstance(turn.get("value"), str):
                        nxt = conv[k + 1] if k + 1 < len(conv) else None
                        reply = (
                            nxt["value"]
                            if isinstance(nxt, dict)
                            and nxt.get("from") not in _USER_ROLES
                            and isinstance(nxt.get("value"), str)
                            else None
                        )
                        return DatasetEntry(turn["value"], reply)
            raise PlanError(f"{where}: 'conversations' has no human/user turn with a string 'value'")
        msgs = obj.get("messages")
        if isinstance(msgs, list):
            for k, m in enumerate(msgs):
                if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
                    nxt = msgs[k + 1] if k + 1 < len(msgs) else None
                    reply = (
                        nxt["content"]
                        if isinstance(nxt, dict)
                        and nxt.get("role") == "assistant"
                        and isinstance(nxt.get("content"), str)
                        else None
                    )
                    return DatasetEntry(m["content"], reply)
            raise PlanError(f"{where}: 'messages' has no user message with a string 'content'")
        for key in ("prompt", "text"):
            if isinstance(obj.get(key), str):
                replies = [obj[r] for r in ("completion", "response") if isinstance(obj.get(r), str)]
                reply = replies[0] if replies else None
                return DatasetEntry(obj[key], reply)
    raise PlanError(f"{where}: expected an object with 'conversations', 'messages', 'prompt' or 'text'")


def read_json_entries(path: Path) -> list[DatasetEntry]:
    """A ShareGPT-style JSON file: a list of entries (or ``{"data": [...]}``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PlanError(f"{path}: cannot read the dataset as JSON ({err})") from err
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise PlanError(f"{path}: expected a JSON list of entries")
    return [_entry(e, f"{path}: entry {i}") for i, e in enumerate(data)]


def read_jsonl_entries(path: Path) -> list[DatasetEntry]:
    """A JSONL file: one entry per non-blank line."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise PlanError(f"{path}: cannot read the dataset ({err})") from err
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise PlanError(f"{path}:{n}: not JSON ({err.msg})") from err
        out.append(_entry(obj, f"{path}:{n}"))
    return out


def read_arrow_entries(path: Path) -> list[DatasetEntry]:
    """A Hugging Face ``datasets`` file on disk (``.parquet``, or ``.arrow`` as ``save_to_disk`` writes it):
    rows read with pyarrow (the optional ``datasets`` extra), each row one entry."""
    try:
        import pyarrow as pa  # local import: an optional dependency, needed only for these formats
        import pyarrow.parquet as pq  # local import: same
    except ImportError as err:
        raise PlanError(
            f"{path}: reading .parquet/.arrow needs pyarrow (pip install 'inference-anatomy[datasets]'); "
            "JSON and JSONL need nothing"
        ) from err
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as src:
                try:
                    table = pa.ipc.open_stream(src).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_file(src).read_all()
    except (OSError, pa.ArrowException) as err:
        raise PlanError(f"{path}: cannot read the dataset ({err})") from err
    return [_entry(row, f"{path}: row {i}") for i, row in enumerate(table.to_pylist())]


def read_entries(path: Path, need_reply: bool = False) -> list[DatasetEntry]:
    """A dataset file's entries by its suffix (.jsonl, .json, .parquet, .arrow), those with an empty prompt
    left out, and with ``need_reply`` those without a reply; never empty."""
    readers = {
        ".jsonl": read_jsonl_entries,
        ".json": read_json_entries,
        ".parquet": read_arrow_entries,
        ".arrow": read_arrow_entries,
    }
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise PlanError(
            f"{path}: unknown dataset format {path.suffix!r} (use .json, .jsonl, .parquet, .arrow)"
        )
    entries = [e for e in reader(path) if e.prompt and (e.reply or not need_reply)]
    if not entries:
        what = "entries with a prompt and a reply" if need_reply else "prompts"
        raise PlanError(f"{path}: no {what} in the dataset")
    return entries


def read_prompts(path: Path) -> list[str]:
    """A dataset file's prompts (``read_entries``)."""
    return [e.prompt for e in read_entries(path)]


def dataset_order(seed: int, n_entries: int, n_requests: int) -> list[int]:
    """Which entry each request takes: a seeded permutation of the file, cycled."""
    perm = np.random.default_rng([seed, _DATASET]).permutation(n_entries)
    return [int(perm[i % n_entries]) for i in range(n_requests)]


# --------------------------------------------------------------------------------------------- tokenizer


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the character a byte-level BPE vocabulary writes → the byte."""
    return {c: b for b, c in bytes_to_unicode().items()}


class Tokenizer:
    """A model's ``tokenizer.json``. Decoding (ids → text, for the chat endpoint and multi-turn history) is
    done here for byte-level BPE vocabularies (GPT-2, Llama-3, Qwen) and needs nothing installed; encoding
    (dataset text → ids) needs the ``tokenizers`` package and is None without it (the text is then sent
    as is and its length read from the server's usage)."""

    def __init__(self, path: Path):
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            vocab = data["model"]["vocab"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise PlanError(f"{file}: not a readable tokenizer.json ({err})") from err
        self.path = file
        self._id_to_token = {int(i): t for t, i in vocab.items()}
        for added in data.get("added_tokens") or []:
            self._id_to_token[int(added["id"])] = added["content"]
        self._special = {int(a["id"]) for a in data.get("added_tokens") or [] if a.get("special")}
        self._bytes = _byte_decoder()
        self._fast: Any = None
        try:
            import tokenizers  # local import: optional; only encoding needs it

            self._fast = tokenizers.Tokenizer.from_file(str(file))
        except ImportError:
            pass

    @property
    def can_encode(self) -> bool:
        return self._fast is not None

    def decode(self, ids: Sequence[int]) -> str:
        """Ids → text (byte-level: each vocabulary character stands for one byte; special tokens dropped)."""
        out = bytearray()
        for i in ids:
            if i in self._special:
                continue
            tok = self._id_to_token.get(int(i))
            if tok is None:
                raise PlanError(f"{self.path}: token id {i} is not in the vocabulary")
            for ch in tok:
                b = self._bytes.get(ch)
                out += bytes([b]) if b is not None else ch.encode()
        return out.decode("utf-8", errors="replace")

    def encode(self, text: str, special: bool = False) -> list[int] | None:
        """Text → ids with the model's own tokenizer (with ``special``, the special tokens its post-processor
        adds, as ``transformers``' ``tokenizer(text).input_ids``); None without ``tokenizers``."""
        if self._fast is None:
            return None
        return list(self._fast.encode(text, add_special_tokens=special).ids)

    def count(self, texts: Sequence[str], special: bool = False) -> list[int] | None:
        """The token count of each text (``encode``, batched); None without ``tokenizers``."""
        if self._fast is None:
            return None
        return [len(e.ids) for e in self._fast.encode_batch(list(texts), add_special_tokens=special)]


@cache
def load_tokenizer(path: str) -> Tokenizer:
    """One Tokenizer per file per process (a dataset point and every shard reuse it)."""
    return Tokenizer(Path(path))


def find_tokenizer(setting: str | None, server_model: str | None) -> Path | None:
    """The tokenizer a plan uses: ``[workload] tokenizer`` when set ("none": never), else the served model's
    folder when it holds a ``tokenizer.json`` (a vLLM model directory), else None."""
    if setting == "none":
        return None
    if setting:
        return Path(setting)
    if server_model and (Path(server_model) / "tokenizer.json").is_file():
        return Path(server_model)
    return None


# ------------------------------------------------------------------------------------------------ prompts


@dataclass(frozen=True)
class Prompt:
    """What one request sends as its (new) user content: token ids, or text; ``input_len`` is the number of
    ids (None for text: the server's usage counts it); ``max_tokens`` its output length."""

    ids: list[int] | None
    text: str | None
    input_len: int | None
    max_tokens: int
    prefix_id: int | None = None


@dataclass(frozen=True)
class WorkloadSpec:
    """A point's request-content settings, as the plan's ``[workload]`` and ``[load]`` tables give them."""

    endpoint: str = "completions"
    dataset: Path | None = None
    tokenizer: Path | None = None
    input_range_ratio: float = 0.0
    input_stddev: float = 0.0
    output_range_ratio: float = 0.0
    output_stddev: float = 0.0
    prefix_len: int = 0
    num_prefixes: int = 1
    turns: int = 1
    turn_delay_ms: float = 0.0
    output_from_dataset: bool = False  # max_tokens = the entry's reply tokens ([workload] output_len)

    @property
    def needs_text(self) -> bool:
        """Chat messages and multi-turn histories are text; so is a dataset without an encoder."""
        return self.endpoint == "chat" or self.turns > 1

    @property
    def is_default(self) -> bool:
        """Random fixed-length token ids on completions: the protocol every older run used."""
        return self == WorkloadSpec()


def spec_from_plan(plan: Plan) -> WorkloadSpec:
    """A plan's request-content settings (the tokenizer found by ``find_tokenizer``)."""
    w = plan.workload
    return WorkloadSpec(
        endpoint=plan.load.endpoint,
        dataset=w.dataset_path,
        tokenizer=find_tokenizer(w.tokenizer, plan.server.model),
        input_range_ratio=w.input_range_ratio,
        input_stddev=w.input_stddev,
        output_range_ratio=w.output_range_ratio,
        output_stddev=w.output_stddev,
        prefix_len=w.prefix_len,
        num_prefixes=w.num_prefixes,
        turns=w.turns,
        turn_delay_ms=w.turn_delay_ms,
        output_from_dataset=w.output_len == "dataset",
    )


def _tokenizer(spec: WorkloadSpec) -> Tokenizer | None:
    """The plan's tokenizer (``load_tokenizer``: once per process), None without one."""
    return load_tokenizer(str(spec.tokenizer)) if spec.tokenizer is not None else None


def build_prompts(
    spec: WorkloadSpec, seed: int, n: int, input_len: int, output_len: int, low: int, high: int
) -> list[Prompt]:
    """Request i's prompt for i in 0..n-1 (deterministic in ``seed``)."""
    outs = lengths(n, output_len, spec.output_range_ratio, spec.output_stddev, seed, _OUTPUT_LEN)
    tok = _tokenizer(spec)
    if spec.needs_text and tok is None and spec.dataset is None:
        raise PlanError("random prompts sent as text (chat endpoint or turns > 1) need [workload] tokenizer")
    prefixes: list[list[int]] = []
    if spec.prefix_len:
        prefixes = prefix_token_ids(seed, spec.num_prefixes, spec.prefix_len, low, high)
    prompts: list[Prompt] = []
    if spec.dataset is not None:
        entries = read_entries(spec.dataset, need_reply=spec.output_from_dataset)
        order = dataset_order(seed, len(entries), n)
        if spec.output_from_dataset:
            outs = reply_lengths(spec, [entries[k] for k in order])
        for i in range(n):
            text = entries[order[i]].prompt
            pid = i % spec.num_prefixes if prefixes else None
            if pid is not None:
                assert tok is not None  # the plan refuses a prefix on a dataset without a tokenizer
                text = tok.decode(prefixes[pid]) + text
            ids = None if spec.needs_text or tok is None else tok.encode(text)
            if ids is None:
                prompts.append(Prompt(None, text, None, outs[i], pid))
            else:
                prompts.append(Prompt(ids, None, len(ids), outs[i], pid))
        return prompts
    if spec.input_range_ratio or spec.input_stddev:
        ins = lengths(n, input_len, spec.input_range_ratio, spec.input_stddev, seed, _INPUT_LEN)
        bodies = variable_token_ids(seed, ins, low, high)
    else:
        bodies = prompt_token_ids(seed, n, input_len, low, high)
    for i, body in enumerate(bodies):
        pid = i % spec.num_prefixes if prefixes else None
        ids = (prefixes[pid] + body) if pid is not None else body
        if spec.needs_text:
            assert tok is not None
            prompts.append(Prompt(None, tok.decode(ids), None, outs[i], pid))
        else:
            prompts.append(Prompt(ids, None, len(ids), outs[i], pid))
    return prompts


def _encoder(spec: WorkloadSpec, what: str) -> Tokenizer:
    """The plan's tokenizer, able to encode; a PlanError naming ``what`` needs it otherwise."""
    tok = _tokenizer(spec)
    if tok is None or not tok.can_encode:
        why = "no [workload] tokenizer" if tok is None else "the tokenizers package is not installed"
        raise PlanError(f"{what} counts tokens with the model's tokenizer: {why}")
    return tok


def reply_lengths(spec: WorkloadSpec, entries: Sequence[DatasetEntry]) -> list[int]:
    """Each entry's reply length in tokens, as vllm bench serve's ShareGPT dataset counts it
    (``len(tokenizer(completion).input_ids)``, special tokens included), at least 1."""
    counts = _encoder(spec, '[workload] output_len = "dataset"').count(
        [e.reply or "" for e in entries], special=True
    )
    assert counts is not None
    return [max(1, c) for c in counts]


def dataset_max_lengths(spec: WorkloadSpec) -> tuple[int | None, int | None]:
    """The longest prompt of the plan's dataset in tokens (None when its text cannot be encoded here: the
    server counts it) and, with ``output_from_dataset``, the longest reply (``reply_lengths``)."""
    assert spec.dataset is not None
    entries = read_entries(spec.dataset, need_reply=spec.output_from_dataset)
    tok = _tokenizer(spec)
    counts = tok.count([e.prompt for e in entries]) if tok is not None else None
    longest_reply = max(reply_lengths(spec, entries)) if spec.output_from_dataset else None
    return (max(counts) if counts else None), longest_reply


def validate(spec: WorkloadSpec, low: int, high: int) -> None:
    """Build one prompt of the plan's workload now, so a missing dataset or tokenizer, an unreadable file or
    random text without a tokenizer is a PlanError before the run folder exists."""
    build_prompts(spec, 0, 1, 1, 1, low, high)


# --------------------------------------------------------------------------------------------- bodies


def _merge(body: dict[str, Any], engine_extra: dict[str, Any], plan_extra: dict[str, Any]) -> dict[str, Any]:
    for extra in (engine_extra, plan_extra):
        for k, v in extra.items():
            if isinstance(v, dict) and isinstance(body.get(k), dict):
                body[k] = {**body[k], **v}
            else:
                body[k] = v
    return body


def completion_body(
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    engine_extra: dict[str, Any],
    plan_extra: dict[str, Any],
) -> dict[str, Any]:
    """The request every engine gets: greedy, fixed output length, usage reported at the end of the stream."""
    return _greedy_body(model, {"prompt": prompt}, max_tokens, engine_extra, plan_extra)


def _greedy_body(
    model: str,
    content: dict[str, Any],
    max_tokens: int,
    engine_extra: dict[str, Any],
    plan_extra: dict[str, Any],
) -> dict[str, Any]:
    """``content`` (the prompt or the messages) with greedy sampling, exactly ``max_tokens`` out (EOS
    ignored), streamed, usage in the last chunk; then the engine's and the plan's extra fields on top."""
    body: dict[str, Any] = {
        "model": model,
        **content,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return _merge(body, engine_extra, plan_extra)


def turn_body(
    spec: WorkloadSpec,
    model: str,
    prompt: Prompt,
    history: list[tuple[str, str]],
    engine_extra: dict[str, Any],
    plan_extra: dict[str, Any],
) -> dict[str, Any]:
    """One request's body: the endpoint's shape around this prompt and the conversation so far (``history``:
    (user text, assistant reply) of each earlier turn; empty for single-turn)."""
    if spec.endpoint == "chat":
        messages: list[dict[str, str]] = []
        for user, reply in history:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        messages.append({"role": "user", "content": prompt.text or ""})
        return _greedy_body(model, {"messages": messages}, prompt.max_tokens, engine_extra, plan_extra)
    if history:
        text = "".join(user + reply for user, reply in history) + (prompt.text or "")
        return completion_body(model, text, prompt.max_tokens, engine_extra, plan_extra)
    content: list[int] | str = prompt.ids if prompt.ids is not None else (prompt.text or "")
    return completion_body(model, content, prompt.max_tokens, engine_extra, plan_extra)


def record_fields(spec: WorkloadSpec, prompt: Prompt, index: int) -> dict[str, Any]:
    """The request record's optional workload fields (collector.raw.records.RequestRecord): only those set."""
    out: dict[str, Any] = {}
    if spec.endpoint != "completions":
        out["endpoint"] = spec.endpoint
    if prompt.ids is None:
        out["prompt_format"] = "text"
    if prompt.prefix_id is not None:
        out["prefix_id"] = prompt.prefix_id
    if spec.turns > 1:
        out["conversation"], out["turn"] = divmod(index, spec.turns)
    return out


def api_key(env_name: str | None, environ: Mapping[str, str]) -> str | None:
    """The API key from the environment variable the plan names (``[load] api_key_env``); None when the plan
    names none; a missing or empty variable is a PlanError (a run without its key would measure 401s)."""
    if env_name is None:
        return None
    key = environ.get(env_name, "")
    if not key:
        raise PlanError(f"[load].api_key_env: the environment variable {env_name} is not set (or empty)")
    return key


def request_headers(api_key: str | None, headers: dict[str, str]) -> dict[str, str]:
    """Extra HTTP headers of every request (and /metrics scrape): the plan's ``headers`` and, with an API key,
    ``Authorization: Bearer <key>`` (how vllm bench, AIPerf and GuideLLM send ``OPENAI_API_KEY``)."""
    out = dict(headers)
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out
