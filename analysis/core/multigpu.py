"""What a second GPU buys, in theory: llama.cpp's split modes and independent replicas (issue #27).

One decode step of a dense model on one GPU is modelled as in experiment 4 (model size): a fixed cost per
step ``a`` plus the weight bytes streamed at an effective bandwidth, ``a + W ÷ bw_eff``; at batch B the
measured one-GPU step time ``S1(B)`` stands for everything else (KV reads, attention, sampling). Each mode
changes which part is divided over the GPUs and what it adds to cross them:

- ``none``     one GPU (the control).
- ``layer``    llama.cpp ``--split-mode layer`` (pipeline): each GPU holds a contiguous half of the layers and
               their KV. A decode step visits the GPUs in turn, so one step still streams all W bytes one
               after another, plus n−1 hand-overs of the hidden state. The KV pool is the GPUs' together.
- ``row``      ``--split-mode row``: every dense weight matrix of a layer is split by rows; for each such
               matmul the main GPU sends its input to the others and gathers their slices of the output
               (ggml-cuda's split-buffer path), so the weight bytes are read in parallel but every matmul
               costs a synchronisation. The KV cache and intermediates stay on the main GPU (llama.cpp's
               ``--main-gpu`` help), so the pool is the main GPU's free memory alone.
- ``tensor``   ``--split-mode tensor`` (experimental in the vendored llama.cpp): weights AND KV split, two
               all-reduces of the hidden state per layer (after attention and after the MLP).
- ``replicas`` two independent servers, each with the whole model; a client spreads requests. A Poisson
               stream split at random is two Poisson streams at half the rate (thinning), and a closed loop
               of c streams split evenly is two loops of c/2, so replica throughput is 2 × S1's at c/2.

Every function is one formula with its units; the cross-GPU costs take a measured synchronisation latency and
peer-to-peer bandwidth (collector.protocol.ceilings measures both where two GPUs are present) or the bounds a
plan
states before the run.
"""

from __future__ import annotations

from analysis.core.model_config import ModelConfig

MODES = ("none", "layer", "row", "tensor", "replicas")

# fp32: ggml keeps the hidden state between ops in F32 on CUDA (the inputs of the split matmuls are
# converted on each device), so a hand-over or an all-reduce moves 4 bytes per element.
ACTIVATION_BYTES = 4.0


def dense_matmuls_per_layer(cfg: ModelConfig) -> int:
    """Dense weight matrices per layer that ``--split-mode row`` splits, matrices: q, k, v, o (attention) +
    gate, up, down (SwiGLU MLP) = 7 for the Qwen2/Llama family (separate q/k/v tensors in the GGUF)."""
    del cfg  # every bundled dense model has separate q/k/v and a gated MLP
    return 7


def weight_bytes_per_gpu(weight_bytes_read: float, n_gpus: int) -> float:
    """Weight bytes each GPU streams per decode step when the weights are divided evenly, bytes: W ÷ n."""
    return weight_bytes_read / n_gpus


def hidden_state_bytes(cfg: ModelConfig, batch: int, act_bytes: float = ACTIVATION_BYTES) -> float:
    """One hidden-state tensor for a batch, bytes: B × hidden_size × bytes per element."""
    return batch * cfg.hidden_size * act_bytes


def ring_allreduce_bytes_per_gpu(message_bytes: float, n_gpus: int) -> float:
    """Bytes each GPU sends in a ring all-reduce of one message, bytes: 2 (n−1) ÷ n × message (NCCL's ring:
    a reduce-scatter then an all-gather, each moving (n−1)/n of the message)."""
    return 2 * (n_gpus - 1) / n_gpus * message_bytes


def layer_split_handovers_per_step(n_gpus: int) -> int:
    """Hidden-state hand-overs in one pipelined decode step, transfers: n − 1 (GPU i passes to GPU i+1)."""
    return n_gpus - 1


def row_split_syncs_per_step(cfg: ModelConfig) -> int:
    """Cross-GPU synchronisations in one row-split decode step, syncs: layers × dense matmuls per layer
    (each split matmul scatters its input and gathers its output before the next op can start)."""
    return cfg.num_hidden_layers * dense_matmuls_per_layer(cfg)


def row_split_transfer_bytes_per_step(
    cfg: ModelConfig, batch: int, n_gpus: int, act_bytes: float = ACTIVATION_BYTES
) -> float:
    """Bytes crossing between GPUs in one row-split decode step, bytes:
    L × B × bytes/element × [(n−1) × Σ inputs + (n−1)/n × Σ outputs] over the 7 split matmuls of a layer —
    each input is copied to the n−1 other GPUs and (n−1)/n of each output is gathered back to the main GPU.
    Inputs: h for q, k, v, gate, up; q_dim for o; d_ff for down.
    Outputs: q_dim, kv_dim twice, h, d_ff twice, h.
    """
    h, d_ff = cfg.hidden_size, cfg.intermediate_size
    q_dim = cfg.num_attention_heads * cfg.head_dim
    kv_dim = cfg.num_key_value_heads * cfg.head_dim
    inputs = 5 * h + q_dim + d_ff
    outputs = q_dim + 2 * kv_dim + h + 2 * d_ff + h
    per_layer = (n_gpus - 1) * inputs + (n_gpus - 1) / n_gpus * outputs
    return cfg.num_hidden_layers * batch * act_bytes * per_layer


def tensor_split_allreduces_per_step(cfg: ModelConfig) -> int:
    """All-reduces in one tensor-split decode step, all-reduces: 2 per layer (after attention, after MLP)."""
    return 2 * cfg.num_hidden_layers


def single_gpu_step_s(fixed_s: float, weight_bytes_read: float, bw_eff_bytes_per_s: float) -> float:
    """One GPU, one stream, s: a + W ÷ bw_eff (experiment 4's fitted line)."""
    return fixed_s + weight_bytes_read / bw_eff_bytes_per_s


def cross_gpu_s(syncs: int, bytes_moved: float, sync_s: float, p2p_bytes_per_s: float) -> float:
    """Time spent crossing GPUs in one step, s: syncs × sync latency + bytes moved ÷ peer bandwidth."""
    return syncs * sync_s + bytes_moved / p2p_bytes_per_s


def mode_step_s(  # noqa: PLR0913 -- the formula's named inputs, keyword-only, as in the docstring
    mode: str,
    cfg: ModelConfig,
    *,
    batch: int,
    step_1gpu_s: float,
    weight_stream_s: float,
    kv_stream_s: float,
    n_gpus: int,
    sync_s: float,
    p2p_bytes_per_s: float,
) -> float:
    """One decode step at batch B in ``mode``, s, from the one-GPU step S1(B) of the same batch:

    - none, replicas (one server's own batch): S1(B)
    - layer:  S1(B) + (n−1) × (sync + hidden ÷ p2p)                 (layers in turn: no time saved)
    - row:    S1(B) − (1 − 1/n) × W_s + L·7 syncs + row bytes ÷ p2p  (weights read in parallel, KV on main)
    - tensor: S1(B) − (1 − 1/n) × (W_s + KV_s) + 2L × (sync + ring(hidden) ÷ p2p)

    where W_s = W ÷ bw_eff (the weight-streaming share of S1) and KV_s the KV-streaming share.
    """
    if mode in ("none", "replicas"):
        return step_1gpu_s
    hidden = hidden_state_bytes(cfg, batch)
    if mode == "layer":
        hops = layer_split_handovers_per_step(n_gpus)
        return step_1gpu_s + cross_gpu_s(hops, hops * hidden, sync_s, p2p_bytes_per_s)
    saved_share = 1 - 1 / n_gpus
    if mode == "row":
        crossing = cross_gpu_s(
            row_split_syncs_per_step(cfg),
            row_split_transfer_bytes_per_step(cfg, batch, n_gpus),
            sync_s,
            p2p_bytes_per_s,
        )
        return step_1gpu_s - saved_share * weight_stream_s + crossing
    if mode == "tensor":
        reduces = tensor_split_allreduces_per_step(cfg)
        moved = reduces * ring_allreduce_bytes_per_gpu(hidden, n_gpus)
        crossing = cross_gpu_s(reduces, moved, sync_s, p2p_bytes_per_s)
        return step_1gpu_s - saved_share * (weight_stream_s + kv_stream_s) + crossing
    raise ValueError(f"unknown split mode {mode!r} (one of {', '.join(MODES)})")


def replicas_tokens_per_s(concurrency: int, step_1gpu_at_half_s: float, n_replicas: int = 2) -> float:
    """Generated tokens/s of n replicas sharing c streams evenly, tokens/s: n × (c/n) ÷ S1(c/n) = c ÷ S1(c/n),
    S1(c/n) being the one-GPU step at the concurrency each replica gets."""
    return concurrency / step_1gpu_at_half_s if n_replicas > 0 else 0.0


def kv_pool_bytes(
    mode: str, gpu_memory_bytes: float, weight_bytes: float, reserve_bytes: float, n_gpus: int
) -> float:
    """Bytes left for the KV cache in ``mode`` (for replicas: one replica's pool), bytes:

    - none, replicas: M − W − r
    - layer, tensor:  n (M − r) − W        (weights and KV spread over every GPU)
    - row:            M − W/n − r          (KV and intermediates on the main GPU alone)
    """
    if mode in ("none", "replicas"):
        pool = gpu_memory_bytes - weight_bytes - reserve_bytes
    elif mode in ("layer", "tensor"):
        pool = n_gpus * (gpu_memory_bytes - reserve_bytes) - weight_bytes
    elif mode == "row":
        pool = gpu_memory_bytes - weight_bytes / n_gpus - reserve_bytes
    else:
        raise ValueError(f"unknown split mode {mode!r} (one of {', '.join(MODES)})")
    return max(0.0, pool)
