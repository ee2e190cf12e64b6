"""Layout (A)'s ciphertexts split over the nodes of a cluster: what each node holds at its peak.

A value of layout (A) is R features x C chunks ciphertexts, every one independent of the others in the elementwise
steps (activations, bootstraps: those run where the ciphertext is). K nodes split a batch as FHE4DMM does
(seed 000): p_n = min(K, C) groups of chunks (ciphertext ranges of whole samples), and p_r = ceil(K / p_n) nodes
share each group's rows (its features). A node holds ceil(R / p_r) x ceil(C / p_n) ciphertexts of every live value.

A PCMM needs every input row for each output row. With p_r > 1 each one is planned as one of (the per-node extra
memory is what the node holds besides its shards):

* gather: the node computes its own output rows and receives the input rows it lacks (the grid's p_m = p_r);
  extra = the gathered rows;
* reduce: the node multiplies its own input rows into a partial sum of every output row (before the rescale,
  one level up), keeps its own rows and sends the others' (p_k = p_r); extra = that partial sum;
* streamed: the gathered rows arrive by blocks of at most stream_bytes and are multiplied into the node's own
  output rows, accumulated before the rescale; extra = one block + that accumulator.

A chain run by blocks (A -> row-wise steps -> B) on p_r > 1 nodes computes its share of A's rows, and B's partial
sums of every output row from them: those of the rows the other nodes own are sent to them (the chain's entry:
moved includes them, chain_reduce says how many).

The planner takes the one of gather / reduce that moves fewer bytes between nodes, streamed when its extra would
exceed stream_bytes (as hemlp.runtime.streamed streams a chain whose layers exceed it in process). A chain that
hemlp.runtime.streamed runs by blocks in process is run by blocks on each node too, on the node's share of rows.
With K = 1 nothing moves, and the peak is hemlp.runtime.streamed.peak_bytes's (tests/compiler/test_node_memory.py).
"""
from __future__ import annotations

from hemlp.runtime.streamed import DEFAULT_STREAM_BYTES, ct_bytes, find_chains

__all__ = ["node_peak", "split_shape"]

#: steps that multiply by a weight matrix (every output row reads every input row)
MATRIX_OPS = ("pcmm", "mambo")
#: steps whose output shares its input's storage (hemlp.runtime.streamed.peak_bytes)
SHARED_OPS = ("alias", "output", "perm")


def split_shape(nodes: int, chunks: int) -> tuple[int, int]:
    """(p_n, p_r): groups of chunks and the nodes sharing each group's rows."""
    p_n = max(1, min(int(nodes), int(chunks)))
    return p_n, -(-int(nodes) // p_n)


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _rows_out(s) -> int:
    return int(s.rows)


def _pcmm_move(s, rows_in: int, ct_in: int, N: int, c_node: int, p_r: int, stream_bytes: int | None) -> dict:
    """The split of one matrix step on p_r nodes per chunk group: its kind, the bytes each node receives, its extra
    memory and (streamed) the rows per block."""
    if p_r <= 1:
        return dict(step=s.out, split="local", moved=0, extra=0, block_rows=None)
    ct_acc = ct_bytes(N, int(s.level_out) + 1)        # a product before its rescale: one level up
    r_out = _rows_out(s)
    gather = (rows_in - _cdiv(rows_in, p_r)) * c_node * ct_in
    reduce = (r_out - _cdiv(r_out, p_r)) * c_node * ct_acc
    kind, moved = ("gather", gather) if gather <= reduce else ("reduce", reduce)
    extra = gather if kind == "gather" else r_out * c_node * ct_acc
    if stream_bytes is not None and extra > stream_bytes:
        block = max(1, int(stream_bytes // (c_node * ct_in)))
        extra = min(block, rows_in) * c_node * ct_in + _cdiv(r_out, p_r) * c_node * ct_acc
        return dict(step=s.out, split="streamed", moved=gather, extra=int(extra), block_rows=block)
    return dict(step=s.out, split=kind, moved=int(moved), extra=int(extra), block_rows=None)


def node_peak(steps, N: int, chunks: int, nodes: int = 1,
              stream_bytes: int | None = DEFAULT_STREAM_BYTES) -> dict:
    """Each node's peak bytes of ciphertexts while layout (A)'s program runs split over `nodes` nodes (the module
    docstring): dict(peak (the node's share of the input included), input (that share), extra (the moved rows,
    partial sums or streamed blocks held besides the shards at the peak), at (the step at the peak), p_n, p_r,
    chains (whether chains run by blocks), splits (per matrix step: split, moved bytes each node receives, extra
    bytes, block_rows; a chain's entry, under its first PCMM, also names the chain and its B's reduce bytes)).

    On one node, chains run by blocks exactly when hemlp.runtime.streamed runs them so in process. Split over rows,
    a chain by blocks keeps B's partial sums of all its rows on every node, which can cost more than the node's
    share of the layers whole: the plan takes the lower of the two peaks."""
    nodes = int(nodes)
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    best = _walk(steps, N, chunks, nodes, stream_bytes, True)
    if best["p_r"] > 1:
        whole = _walk(steps, N, chunks, nodes, stream_bytes, False)
        if whole["peak"] < best["peak"]:
            best = whole
    return best


def _walk(steps, N: int, chunks: int, nodes: int, stream_bytes: int | None, use_chains: bool) -> dict:
    p_n, p_r = split_shape(nodes, chunks)
    c_node = _cdiv(chunks, p_n)
    share = lambda rows, level: _cdiv(rows, p_r) * c_node * ct_bytes(N, level)  # noqa: E731
    last_use, out_name = {}, next(s.out for s in steps if s.op == "output")
    for i, s in enumerate(steps):
        for name in s.inputs:
            last_use[name] = i
    chains = find_chains(steps, last_use, out_name) if use_chains else {}
    store, nbytes, held = {}, {}, set()         # name -> storage, storage -> bytes per node, the caller's input
    rows_of, level_of = {}, {}
    live = lambda: sum(nbytes[k] for k in set(store.values()) | held)  # noqa: E731
    peak, at, peak_extra, input_share, splits, i = 0, None, 0, 0, [], 0
    while i < len(steps):
        s, last, extra, chained = steps[i], i, 0, False
        if i in chains:
            idx = chains[i]
            inter = [steps[k] for k in idx[:-1] if steps[k].op != "alias"]
            per_row = sum(ct_bytes(N, int(m.level_out)) for m in inter)
            P = 1 if s.index is None else int(s.index.shape[1])
            rows_a = _cdiv(int(s.U.shape[0]), p_r)         # this node's rows of U_A
            if stream_bytes is not None and rows_a * P * c_node * per_row > stream_bytes:
                block = max(1, int(stream_bytes // (P * c_node * per_row)))
                pair = max([ct_bytes(N, int(inter[k].level_out)) + ct_bytes(N, int(inter[k + 1].level_out))
                            for k in range(len(inter) - 1)] or [ct_bytes(N, int(inter[0].level_out))])
                B = steps[idx[-1]]
                # one block of two consecutive layers, and B's partial sums of all its rows (then, with p_r > 1,
                # reduced over the nodes sharing the rows)
                extra = block * P * c_node * pair + int(B.rows) * c_node * ct_bytes(N, int(B.level_out) + 1)
                mv = _pcmm_move(s, rows_of[s.inputs[0]], ct_bytes(N, level_of[s.inputs[0]]), N, c_node, p_r,
                                stream_bytes)
                extra += mv["extra"]
                # B's partial sums of the rows the other nodes sharing the chunk group own go to them
                b_moved = (int(B.rows) - _cdiv(B.rows, p_r)) * c_node * ct_bytes(N, int(B.level_out) + 1)
                splits.append(dict(mv, moved=int(mv["moved"] + b_moved), chain_reduce=int(b_moved),
                                   chain=[steps[k].out for k in idx], chain_block_rows=block))
                last, s, chained = idx[-1], B, True
        if not chained and s.op in MATRIX_OPS:
            mv = _pcmm_move(s, rows_of[s.inputs[0]], ct_bytes(N, level_of[s.inputs[0]]), N, c_node, p_r,
                            stream_bytes)
            extra = mv["extra"]
            splits.append(mv)
        if s.op in SHARED_OPS:
            store[s.out] = store[s.inputs[0]]
            rows_of[s.out], level_of[s.out] = rows_of[s.inputs[0]], level_of[s.inputs[0]]
        else:
            store[s.out] = s.out
            rows_of[s.out], level_of[s.out] = int(s.rows), int(s.level_out)
            nbytes[s.out] = share(s.rows, s.level_out)
            if s.op == "input":
                held.add(s.out)
                input_share = nbytes[s.out]
        now = live() + extra
        if now > peak:
            peak, at, peak_extra = now, s.out, extra
        for k in range(i, last + 1):
            for name in steps[k].inputs:
                if last_use.get(name) == k and name != out_name:
                    store.pop(name, None)
        i = last + 1
    return dict(peak=int(peak), input=int(input_share), extra=int(peak_extra), at=at, p_n=p_n, p_r=p_r,
                chains=any("chain" in m for m in splits), splits=splits)
