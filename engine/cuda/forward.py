"""One trunk step on the GPU: the buffers (`Workspace`) and the launch sequence of a forward pass
over T rows of several slots, the LM head on the rows that sample, the on-device draw, and the
DeltaNet replay after verification. The sequence holds no host logic between launches, so a
step is captured once per row layout (T, segments, sampled rows) and replayed as a CUDA graph;
the per-step row metadata lives in device arrays written before each replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.backend import SamplingParams
from engine.cuda import build, kernels
from engine.cuda.kernels import Ops
from engine.cuda.model import CudaModel
from engine.cuda.weights import F32

PENALTY_SLOTS = 80  # distinct penalty tokens per sampled row (window 64 + drafts)
# passes of at least this many rows run the DeltaNet recurrence over dn_cb state columns per
# CTA (prompt chunks: 4.8 % more prefill throughput at 512 tokens on the H200); decode passes
# keep a head per CTA, the norm inside (one launch less per layer: 0.07 ms per 1-row step)
DN_SPLIT_ROWS = 16
# A layout's graph is captured on its second run, not its first: capturing and instantiating a
# step costs tens of ms of host time (a 4-slot decode layout's first step took ~67 ms on the
# H200 host, bench/step_host.py), which one-off layouts (a follow-up's new tokens, a prompt's
# last chunk) would pay before their first token for nothing. Decode layouts repeat every step.
CAPTURE_ON_RUN = 2


@dataclass(frozen=True)
class Layout:
    """The shape of one pass: what a captured graph depends on."""

    n_rows: int  # T
    n_seg: int  # S (one segment per slot)
    n_sample: int  # M rows through the LM head
    saved: bool  # DeltaNet inputs kept per layer (T <= t_save) for a replay
    shallow: bool = True  # some row below KernelDims.att_core_below (Ops.attention)
    deep: bool = True  # some row at or past it

    @classmethod
    def of_rows(cls, n_rows: int, n_seg: int, n_sample: int, saved: bool, first_pos: int, last_pos: int, core_below: int) -> Layout:  # fmt: skip
        """The layout of a pass whose rows sit at positions first_pos..last_pos."""
        shallow, deep = first_pos < core_below, last_pos >= core_below
        return cls(n_rows, n_seg, n_sample, saved, shallow, deep)


class MetaViews:
    """Named views of a step's metadata buffer (set by Workspace): the device buffer's are the
    Workspace's own attributes, the pinned host buffer's a MetaViews of their own."""

    row_tok: Any
    row_pos: Any
    row_slot: Any
    row_first: Any
    row_from: Any
    seg: Any
    sample_idx: Any
    fparams: Any
    iparams: Any
    pen_off: Any
    pen_tok: Any
    pen_cnt: Any


class Workspace(MetaViews):
    """Every device buffer of the step (shapes in comments; E = n_embd, C = conv channels)."""

    def __init__(self, model: CudaModel, n_slots: int, kv_tokens: int, page_size: int, max_rows: int, max_sample: int, t_save: int = 64) -> None:  # fmt: skip
        import cupy as cp
        import cupyx

        d = model.dims
        f32, i32 = cp.float32, cp.int32
        n_dn = sum(d.recurrent)
        n_att = model.n_attention_slabs  # the trunk's attention layers (+ the MTP block's)
        C, P, PA, dv = d.conv_channels, d.dn_proj_width, d.att_proj_width, d.ssm_d_state
        self.t_save, self.max_rows, self.max_sample = min(t_save, max_rows), max_rows, max_sample
        self.x = cp.zeros((max_rows, d.n_embd), f32)  # residual stream
        self.a = cp.zeros((max_rows, d.n_embd), f32)  # normed input of a product
        # the row kernels' packed f16 copies of the products' main inputs (a, h, hs), written
        # by their producers beside the f32 ones (kernels.pack_activations); passed whole: a
        # pass of T rows uses their first kernels.packed_rows(T) rows; rows of packed_width
        pw = kernels.packed_width
        self.ah = cp.zeros((kernels.packed_rows(max_rows), pw(d.n_embd)), cp.float16)
        self.proj_save = cp.zeros((max(n_dn, 1), self.t_save, P), f32)  # per-layer DN projections
        self.u_save = cp.zeros((max(n_dn, 1), self.t_save, C), f32)  # per-layer conv outputs
        self.proj_big = cp.zeros((max_rows, P), f32)  # (long passes: no replay)
        self.u_big = cp.zeros((max_rows, C), f32)
        self.yd = cp.zeros((max_rows, d.ssm_n_v_heads * dv), f32)  # gated-norm output
        self.ydh = cp.zeros((kernels.packed_rows(max_rows), d.ssm_n_v_heads * dv), cp.float16)
        self.pa = cp.zeros((max_rows, PA), f32)  # q+gate | k | v
        self.qn = cp.zeros((max_rows, d.n_head, d.head_dim), f32)  # normed, rotated q
        self.ya = cp.zeros((max_rows, d.n_head * d.head_dim), f32)  # gated attention out
        self.yah = cp.zeros((kernels.packed_rows(max_rows), d.n_head * d.head_dim), cp.float16)
        self.gu = cp.zeros((max_rows, 2 * d.n_ff), f32)  # gate | up
        self.h = cp.zeros((max_rows, d.n_ff), f32)
        self.hh = cp.zeros((kernels.packed_rows(max_rows), pw(d.n_ff)), cp.float16)
        self.hs = cp.zeros((max_sample, d.n_embd), f32)  # sampled rows' normed hidden
        self.hsh = cp.zeros((kernels.packed_rows(max_sample), pw(d.n_embd)), cp.float16)
        if model.mtp is not None:  # the MTP head's input (engine/cuda/mtp.py)
            self.mtp_pending = cp.zeros((n_slots, d.n_embd), f32)  # last trunk hidden per slot
            self.mtp_hidden = cp.zeros((max_rows, d.n_embd), f32)  # a pass's hidden inputs
            self.mtp_cat = cp.zeros((max_rows, 2 * d.n_embd), f32)  # enorm(e) | hnorm(h)
        self.logits = cp.zeros((max_sample, d.n_vocab), f32)
        # sequence state: [layer][slot]...
        self.rec = cp.zeros((max(n_dn, 1), n_slots, d.ssm_n_v_heads, dv, dv), f32)
        self.conv = cp.zeros((max(n_dn, 1), n_slots, 3, C), f32)
        hkv, hd = d.n_head_kv, d.head_dim
        pool_rows = kv_tokens // page_size * page_size
        self.kq = cp.zeros((max(n_att, 1), pool_rows, hkv, hd), cp.int8)  # q8_0 K quants
        self.kd = cp.zeros((max(n_att, 1), pool_rows, hkv, hd // 32), cp.float16)  # K scales
        self.vq = cp.zeros_like(self.kq)
        self.vd = cp.zeros_like(self.kd)
        self.page_table = cp.zeros((n_slots, -(-d.context_length // page_size)), i32)
        self.rseg = cp.zeros((5, n_slots), i32)  # slot, start, rows, commit, keep: the replay's
        self.out_tok = cp.zeros(max_sample, i32)
        # launch-ahead (CudaBackend.launch): where launched steps' drawn tokens are copied, in
        # turn (at most two steps are in flight)
        self.drawn_host = [cupyx.empty_pinned(max_sample, np.int32) for _ in range(2)]
        # Per-step metadata: views of one device buffer written from one pinned host buffer
        # of the same layout (`host`), so a step's metadata is a single copy.
        fields = {
            "row_tok": (max_rows,),
            "row_pos": (max_rows,),
            "row_slot": (max_rows,),
            "row_first": (max_rows,),
            # launch-ahead (CudaBackend.launch): row i's token is out_tok[row_from[i]], drawn by
            # the step before, gathered on the device before the pass
            "row_from": (max_rows,),
            "seg": (5, n_slots),  # slot, start, rows, commit, keep
            "sample_idx": (max_sample,),
            "fparams": (max_sample, 8),  # f32 (the buffer's bits)
            "iparams": (max_sample, 4),
            "pen_off": (max_sample + 1,),
            "pen_tok": (max_sample * PENALTY_SLOTS,),
            "pen_cnt": (max_sample * PENALTY_SLOTS,),
        }
        size = sum(int(np.prod(shape)) for shape in fields.values())
        self.meta = cp.zeros(size, i32)
        self.meta_host = cupyx.zeros_pinned(size, np.int32)
        self._host = MetaViews()
        self._meta_copied = cp.cuda.Event(disable_timing=True)
        offset = 0
        for name, shape in fields.items():
            n = int(np.prod(shape))
            dev, host = self.meta[offset : offset + n], self.meta_host[offset : offset + n]
            if name == "fparams":
                dev, host = dev.view(f32), host.view(np.float32)
            setattr(self, name, dev.reshape(shape))
            setattr(self._host, name, host.reshape(shape))
            offset += n

    def host_meta(self) -> MetaViews:
        """The pinned host metadata buffer, to be written for the next pass. Waits until the
        previous upload has left it: that copy is asynchronous and runs only when the stream
        reaches it, and a host that queues prefill passes without reading anything back would
        otherwise overwrite the buffer before the previous pass's copy has read it."""
        self._meta_copied.synchronize()
        return self._host

    def upload_meta(self) -> None:
        """The host metadata buffer (written through host_meta) to the device: one
        asynchronous copy on the current stream."""
        self.meta.set(self.meta_host)
        self._meta_copied.record()

    def pool(self, att_index: int) -> tuple[Any, Any, Any, Any]:
        return (self.kq[att_index], self.kd[att_index], self.vq[att_index], self.vd[att_index])

    def copy_page(self, src: int, dst: int, n_tokens: int, page_size: int) -> None:
        """Copy-on-write of KV page src's first n_tokens rows into page dst, every layer."""
        for buf in (self.kq, self.kd, self.vq, self.vd):
            buf[:, dst * page_size : dst * page_size + n_tokens] = buf[
                :, src * page_size : src * page_size + n_tokens
            ]


class Forward:
    """The launch sequence of a step over a Workspace."""

    def __init__(self, model: CudaModel, ws: Workspace, ops: Ops) -> None:
        self.m, self.ws, self.ops = model, ws, ops
        self._graphs: dict[Layout, Any] = {}
        self._runs: dict[Layout, int] = {}  # direct runs of each layout not captured yet
        self.att_parts = ops.attention_parts(ws.max_rows)  # context-split scratch

    def use_ops(self, ops: Ops) -> None:
        """Launch `ops` from now on (an op-kernel variant for benchmarks and tests); the captured
        step graphs hold the old kernels, so they go."""
        self.ops, self.att_parts = ops, ops.attention_parts(self.ws.max_rows)
        self._graphs.clear()

    def trunk(self, lay: Layout) -> None:
        """Embedding, every layer, final norm (into ws.a) for the first n_rows rows."""
        m, ws, ops, d = self.m, self.ws, self.ops, self.m.dims
        T, S = lay.n_rows, lay.n_seg
        x, a, ah = ws.x[:T], ws.a[:T], ws.ah
        kernels.embed(m.token_embd, ws.row_tok[:T], x)
        for layer in m.layers:
            ops.rmsnorm(x, layer.attn_norm, a, d.rms_eps, yh=ah)
            if layer.recurrent:
                self._deltanet(layer, T, S, lay.saved)
            else:
                self._attention(layer, T, lay.shallow, lay.deep)
            self._ffn(layer, T)
        ops.rmsnorm(x, m.output_norm, a, d.rms_eps, yh=ah)

    def _ffn(self, layer: Any, T: int) -> None:
        """x += FFN(post_norm(x)) over the first T rows."""
        ws, ops, d = self.ws, self.ops, self.m.dims
        x, a, ah = ws.x[:T], ws.a[:T], ws.ah
        ops.rmsnorm(x, layer.post_norm, a, d.rms_eps, yh=ah)
        if _swiglu_in_product(layer, T):
            kernels.matmul_swiglu(layer.ffn_in[0].weight, a, ah, ws.hh)  # ws.h is not written
        else:
            for p in layer.ffn_in:
                kernels.matmul(p.weight, a, ws.gu[:T, p.offset : p.offset + p.weight.rows], xh=ah)
            ops.swiglu(ws.gu[:T], ws.h[:T], ws.hh, interleaved=layer.ffn_interleaved)
        kernels.matmul(layer.ffn_down, ws.h[:T], x, accumulate=True, xh=ws.hh)

    def mtp_block(self, T: int, M: int) -> None:
        """The MTP head over T rows (tokens, positions and slots in ws.row_*, hidden inputs in
        ws.mtp_hidden): its KV rows written, its normed output in ws.a, and the logits of the M
        rows ws.sample_idx names in ws.logits. Plain launches (no graph): engine/cuda/mtp.py
        runs it after the host knows which rows were accepted."""
        m, ws, ops, d = self.m, self.ws, self.ops, self.m.dims
        head = m.mtp
        assert head is not None, "the model has no MTP head"
        E, x, cat = d.n_embd, ws.x[:T], ws.mtp_cat[:T]
        kernels.embed(head.embed, ws.row_tok[:T], x)
        ops.rmsnorm(x, head.enorm, cat[:, :E], d.rms_eps)
        ops.rmsnorm(ws.mtp_hidden[:T], head.hnorm, cat[:, E:], d.rms_eps)
        kernels.matmul(head.eh_proj, cat, x)  # embedding half first, as the reference
        ops.rmsnorm(x, head.block.attn_norm, ws.a[:T], d.rms_eps, yh=ws.ah)
        self._attention(head.block, T, True, True)
        self._ffn(head.block, T)
        ops.rmsnorm(x, head.head_norm, ws.a[:T], d.rms_eps, yh=ws.ah)
        if M:
            self._gather_sampled(T, M)
            kernels.matmul(head.head, ws.hs[:M], ws.logits[:M], xh=ws.hsh)

    def _deltanet(self, layer: Any, T: int, S: int, saved: bool) -> None:
        m, ws, ops, d = self.m, self.ws, self.ops, self.m.dims
        i, C, hv = layer.dn_index, d.conv_channels, d.ssm_n_v_heads
        proj = ws.proj_save[i, :T] if saved else ws.proj_big[:T]
        u = ws.u_save[i, :T] if saved else ws.u_big[:T]
        _input_products(layer.mixer_in, ws.a[:T], ws.ah, proj)
        ops.dn_conv(proj, layer.conv_w, ws.conv[i], u, ws.row_slot, ws.row_first)
        zo = C + hv * d.ssm_d_state
        z, beta, alpha = proj[:, C:], proj[:, zo:], proj[:, zo + hv :]
        yh = ws.ydh if mixer_out_packed(layer) else None
        ops.dn_recur(
            u,
            z,
            beta,
            alpha,
            m.ssm_a[i],
            m.dt_bias[i],
            m.ssm_norm[i],
            ws.rec[i],
            ws.yd[:T],
            ws.seg,
            S,
            hv,
            commit=(proj, ws.conv[i], 0, 0),
            split=T >= DN_SPLIT_ROWS,
            yh=yh,
        )
        kernels.matmul(layer.mixer_out, ws.yd[:T], ws.x[:T], accumulate=True, xh=yh)

    def _attention(self, layer: Any, T: int, shallow: bool, deep: bool) -> None:
        ws, ops, d = self.ws, self.ops, self.m.dims
        pa = ws.pa[:T]
        _input_products(layer.mixer_in, ws.a[:T], ws.ah, pa)
        qw = 2 * d.n_head * d.head_dim
        kf, vf = pa[:, qw:], pa[:, qw + d.n_head_kv * d.head_dim :]
        pool = ws.pool(layer.att_index)
        meta = (ws.page_table, ws.row_slot, ws.row_pos)
        ops.attn_prep(
            pa, kf, vf, layer.q_norm, layer.k_norm, ws.qn[:T], pool, *meta, d.rope_freq_base
        )
        scale, ya = d.attention_scale, ws.ya[:T]
        yh = ws.yah if mixer_out_packed(layer) else None
        ops.attention(ws.qn[:T], pa, pool, *meta, scale, ya, self.att_parts, shallow, deep, yh)
        kernels.matmul(layer.mixer_out, ws.ya[:T], ws.x[:T], accumulate=True, xh=yh)

    def head(self, T: int, M: int) -> None:
        """LM head over the M gathered rows (ws.sample_idx) of a pass of T rows into ws.logits."""
        ws = self.ws
        self._gather_sampled(T, M)
        kernels.matmul(self.m.output, ws.hs[:M], ws.logits[:M], xh=ws.hsh)

    def _gather_sampled(self, T: int, M: int) -> None:
        """The M sampled rows (ws.sample_idx) of ws.a into ws.hs, and of ws.ah (as a pass of T
        rows wrote it) into ws.hsh."""
        ws, idx = self.ws, self.ws.sample_idx[:M]
        self.ops.gather(ws.a, idx, ws.hs[:M])
        self.ops.gather_packed(ws.ah, T, idx, ws.hsh)

    def draw(self, M: int) -> None:
        ws = self.ws
        self.ops.sample(
            ws.logits[:M],
            ws.fparams[:M],
            ws.iparams[:M],
            ws.pen_off[: M + 1],
            ws.pen_tok,
            ws.pen_cnt,
            ws.out_tok[:M],
        )

    def step_launches(self, lay: Layout) -> None:
        self.trunk(lay)
        if lay.n_sample:
            self.head(lay.n_rows, lay.n_sample)
            self.draw(lay.n_sample)

    def run(
        self, lay: Layout, use_graph: bool = True, queued: Callable[[], None] | None = None
    ) -> None:
        """The whole pass. A layout's runs before its CAPTURE_ON_RUN-th are direct launches; that
        run is direct and captured as a graph too, and later runs replay the graph. queued (if
        given) is called once the pass is queued: on the capturing run before the capture, which
        waits for the device and then records every launch again (tens of ms), so the caller's
        tokens need not wait for that."""
        import cupy as cp

        if not use_graph:
            self.step_launches(lay)
        elif (graph := self._graphs.get(lay)) is not None:
            graph.launch(cp.cuda.get_current_stream())
        else:
            self.step_launches(lay)  # direct (the first also loads every kernel)
            runs = self._runs.get(lay, 0) + 1
            if runs >= CAPTURE_ON_RUN:
                self._runs.pop(lay, None)
                if queued is not None:
                    queued()
                self._capture(lay)
                return
            self._runs[lay] = runs
        if queued is not None:
            queued()

    def _capture(self, lay: Layout) -> None:
        """Record the layout's launches as a graph (after the device has finished its work)."""
        import cupy as cp

        capture = cp.cuda.Stream(non_blocking=True)
        cp.cuda.get_current_stream().synchronize()
        with capture:
            capture.begin_capture()
            self.step_launches(lay)
            self._graphs[lay] = capture.end_capture()

    def replay(self, n_seg: int) -> None:
        """Re-run the accepted rows of ws.rseg's segments through every DeltaNet layer from the
        saved state (states written, no outputs), and rebuild their conv states."""
        ws, m, d = self.ws, self.m, self.m.dims
        n_dn = sum(d.recurrent)
        if n_dn == 0:
            return
        C, P, hv, dv, ts = (
            d.conv_channels,
            d.dn_proj_width,
            d.ssm_n_v_heads,
            d.ssm_d_state,
            ws.t_save,
        )
        zo = C + hv * dv
        proj0 = ws.proj_save[0]
        strides = (ts * C, ts * P, hv, ws.rec[0].size)
        self.ops.dn_recur(
            ws.u_save[0],
            ws.u_save[0],
            proj0[:, zo:],
            proj0[:, zo + hv :],
            m.ssm_a,
            m.dt_bias,
            m.ssm_norm,
            ws.rec,
            None,
            ws.rseg,
            n_seg,
            hv,
            layers=n_dn,
            strides=strides,
            commit=(proj0, ws.conv, ts * P, ws.conv[0].size),
        )


def _input_products(parts: list[Any], a: Any, ah: Any, out: Any) -> None:
    """out[:, p.offset:][:, :rows] = p.weight a for every projection p of a mixer's input: two
    of different formats in one launch where a pair kernel takes them (kernels.pairs)."""
    if len(parts) == 2 and kernels.pairs(parts[0].weight, parts[1].weight, a.shape[0]):
        first, second = parts
        kernels.matmul_pair(((first.weight, first.offset), (second.weight, second.offset)), a, ah, out)  # fmt: skip
        return
    for p in parts:
        kernels.matmul(p.weight, a, out[:, p.offset : p.offset + p.weight.rows], xh=ah)


def mixer_out_packed(layer: Any) -> bool:
    """Whether the layer's mixer writes its output packed too, for its output product to read
    (MatmulConfig.packed_mixer_out; the exact f32 product of f32 weights reads f32 rows). The
    mixers store packed rows as wide as their output, the output weight's row length: a
    multiple of 256 (weights.check_shape refuses others), so of the 32 `packed_at` needs."""
    return build.MATMUL_CONFIG.packed_mixer_out and layer.mixer_out.ggml_type != F32


def _swiglu_in_product(layer: Any, T: int) -> bool:
    """Whether a pass of T rows finishes the layer's SwiGLU in its gate|up product: an
    interleaved gate|up weight on the row kernels (the tiled ones of prompt chunks have no such
    epilogue), and a down product that reads the packed h (every type but f32)."""
    cfg = build.MATMUL_CONFIG
    return (
        cfg.swiglu_epilogue
        and layer.ffn_interleaved
        and not cfg.tiled(T)
        and layer.ffn_down.ggml_type != F32
    )


def sampling_rows(
    params: list[SamplingParams], counters: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """sample.cu's per-row parameters: fparams f32 [M][8] (temperature, top_p, min_p,
    repetition, frequency and presence penalties, 2 unused) and iparams i32 [M][4] (top_k, the
    seed's low and high words, the draw counter)."""
    fp = np.zeros((len(params), 8), np.float32)
    ip = np.zeros((len(params), 4), np.int64)
    for j, (p, counter) in enumerate(zip(params, counters, strict=True)):
        fp[j, :6] = (p.temperature, p.top_p, p.min_p, p.repetition_penalty,
                     p.frequency_penalty, p.presence_penalty)  # fmt: skip
        ip[j] = (p.top_k, p.seed & 0xFFFFFFFF, (p.seed >> 32) & 0x7FFFFFFF, counter)
    return fp, ip.astype(np.int32)


def penalty_lists(
    contexts: list[list[int]], windows: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sampled row: the distinct tokens of its last `window` context tokens and their counts
    (pen_off i32 [M+1], pen_tok, pen_cnt)."""
    off, toks, cnts = [0], [], []
    for ctx, window in zip(contexts, windows, strict=True):
        if window > 0 and ctx:
            ids, counts = np.unique(np.asarray(ctx[-window:], dtype=np.int64), return_counts=True)
            toks += ids.tolist()
            cnts += counts.tolist()
        off.append(len(toks))
    return np.array(off, np.int32), np.array(toks or [0], np.int32), np.array(cnts or [0], np.int32)
