"""layout="auto" with bootstrap=True: layouts (A), (P) and (A′), each with its own bootstrap placement, compared by
the planner's estimate *including the bootstraps*, among those whose evaluation keys fit the key-memory limit.

Each candidate is planned as compile(..., layout=that, bootstrap=True) would plan it
(hemlp.layouts.batch_bootstrap.plan_bootstrapped, hemlp.layouts.packed_bootstrap.plan_packed_bootstrapped: the same
placement DP on the same level DAG, each node priced with that layout's unit costs; hemlp.layouts.mlwe_bootstrap:
layout (A′)'s refreshes at its activation segments, batched by the measured k), and its estimate() is the one
the plan prints: layers + placed bootstraps (+ layout (P)'s diagonals encoded per run), seconds per batch on one
thread. Layout (A) refreshes one ciphertext per feature and chunk, layout (P) one packed ciphertext per value and
group of samples, with sparse bootstraps of the packed period's slots: a single image of a conv net bootstraps a
handful of ciphertexts in (P) against hundreds in (A); a large batch fills (A)'s slots and (P) runs many groups.
Layout (A′) refreshes k = N/B' features per ciphertext in MaMBo's arrangement (the linear layer at level 1, the
refresh the next segment's CoeffToSlot inside an S2C-first bootstrap): for a chain of dense layers at a batch well
below the slots it refreshes the fewest ciphertexts. The reason names the chosen plan's pipeline: whether its
refreshes run batched and as MaMBo, and why (hemlp.planner.bootstrap_lowering's estimates, pipeline_why).

Keys: the evaluation keys in memory (relinearisation, layout (P)'s rotation keys, and the bootstrapping keys of the
planned pipeline, estimated from the parameters before any key exists) must fit MAX_BOOT_EVAL_KEY_BYTES, the budget
the bootstrap lowering already plans batched keys within (hemlp.planner.bootstrap_lowering.MAX_BATCH_KEY_BYTES)
(layout (A′): its ModPack and rotation keys and its refresh keys; a plan whose ModPack keys alone exceed the (A′)
limit is declined by its estimate()). Memory: the server's estimate, or split over nodes each node's peak
(hemlp.layouts.MemoryLimit). Encrypted weights (layout (C)) are another
kind of plan: compile plans them alone (hemlp.layouts.blocked_bootstrap), never against (A) / (P).
"""
from __future__ import annotations

from dataclasses import replace

from hemlp.compiler.params import step_cost
from hemlp.fhe import Params
from hemlp.errors import EncodingError, LevelError, ResourceError, ShapeError, UnsupportedError
from hemlp.layouts import MemoryLimit, as_limit, batch_bootstrap, check_memory, choose, get
from hemlp.layouts.base import Layout
from hemlp.layouts.batch import Batch
from hemlp.layouts.batch_bootstrap import single_key_bytes
from hemlp.layouts.mlwe import Mlwe
from hemlp.layouts.packed import Packed
from hemlp.layouts.blocked_bootstrap import plan_blocked_bootstrapped
from hemlp.layouts.mlwe_bootstrap import plan_mlwe_bootstrapped
from hemlp.layouts.packed_bootstrap import plan_packed_bootstrapped
from hemlp.planner.bootstrap_lowering import MAX_BATCH_KEY_BYTES
from hemlp.planner.resources import estimate_resources
from hemlp.runtime import shards, streamed

__all__ = ["MAX_BOOT_EVAL_KEY_BYTES", "single_key_bytes", "boot_key_bytes", "eval_key_bytes", "memory_bytes",
           "server_bytes", "batch_memory_floor", "fit_batch_pipeline", "choose_bootstrapped", "pipeline_why",
           "BOOTSTRAPPED", "plan_with_bootstraps", "pipeline_label"]

#: the evaluation keys (bootstrapping keys included) a bootstrapped plan may hold for "auto" to choose it
MAX_BOOT_EVAL_KEY_BYTES = MAX_BATCH_KEY_BYTES
GIB = 2.0 ** 30
#: the S2C-first batch sizes whose key sizes fit_batch_pipeline tries as key budgets (the planner prices these)
FAMILY_BATCH_SIZES = (1, 2, 4, 8, 16)


def boot_key_bytes(lay: Layout) -> int:
    """The bootstrapping keys a planned layout's keygen() makes, in memory (0 without bootstraps): single CtS-first
    keys for the program's bootstrap slots (layout (P): its sparse period), or the S2C-first batch keys of size k."""
    steps = batch_bootstrap.bootstrap_steps(lay.steps)
    if not steps:
        return 0
    if batch_bootstrap.boot_order(lay.steps) == "s2c_first":
        return batch_bootstrap.family_key_bytes(lay.params, "s2c_first", batch_bootstrap.boot_batch_size(lay.steps))
    return batch_bootstrap.family_key_bytes(lay.params, "cts_first", slots=getattr(lay.program, "boot_slots", None))


def memory_bytes(lay: Layout) -> tuple[int, int]:
    """(server memory, evaluation keys) of a planned layout, bootstrapping keys included in both: one resource
    estimate."""
    boot = boot_key_bytes(lay)
    r = estimate_resources(lay, boot)
    return int(r.server_memory_bytes), int(r.eval_key_bytes) + boot


def eval_key_bytes(lay: Layout) -> int:
    """All of a planned layout's evaluation keys in memory: relinearisation and rotation keys (the resource
    estimate) plus its bootstrapping keys."""
    return memory_bytes(lay)[1]


def server_bytes(lay: Layout) -> int:
    """A planned layout's estimated server memory with its bootstrapping keys."""
    return memory_bytes(lay)[0]


def batch_memory_floor(steps, N: int, chunks: int) -> tuple[int, str]:
    """(bytes, why): a lower bound of layout (A)'s server memory estimate under any bootstrap placement, from the
    lowered steps alone, so that "auto" can pass over layout (A) before planning its bootstraps. An activation
    that no streamed chain covers (hemlp.runtime.streamed.find_chains; inserting bootstraps only adds
    single-reader steps, so it covers no more) holds its input, read at no fewer levels than it consumes, and its
    output at once: streamed.peak_bytes counts both, and the estimate holds that peak."""
    out = next(s.out for s in steps if s.op == "output")
    last_use = {name: i for i, s in enumerate(steps) for name in s.inputs}
    covered = {j for idx in streamed.find_chains(steps, last_use, out).values() for j in idx[1:-1]}
    rows = {s.out: s.rows for s in steps}
    best, why = 0, ""
    for i, s in enumerate(steps):
        if s.op not in ("poly", "square") or i in covered:
            continue
        d = step_cost(s)
        held = chunks * (rows[s.inputs[0]] * streamed.ct_bytes(N, d) + s.rows * streamed.ct_bytes(N, 0))
        if held > best:
            best, why = held, (f"activation {s.out!r} holds {rows[s.inputs[0]] * chunks} input ciphertexts at >= {d} "
                               f"levels and its output at once")
    return best, why


def pipeline_why(lay: Layout) -> str:
    """Why a bootstrapped plan's refreshes do or do not run batched and as MaMBo: its pipeline's reason (the cheapest
    family of hemlp.planner.bootstrap_lowering for layout (A), the refresh batch for (A′), (P)'s single sparse
    bootstraps) and each placement's MaMBo reason."""
    b = batch_bootstrap.summary(lay.steps, lay.params, lay.batch_size)
    if b is None:
        return "no bootstrap placed: nothing to batch or fuse"
    rows = b["placements"]
    k = max(int(r.get("k", 1)) for r in rows)
    batched = [r for r in rows if r["kind"] in ("batched", "mambo") and int(r.get("k", 1)) > 1]
    head = (f"batched bootstrapping k={k} on {len(batched)} of {len(rows)} point(s)" if batched else
            "batched bootstrapping not used")
    parts = [f"{head} ({b['lowering']})" if b.get("lowering") else head]
    fused = sum(r["kind"] == "mambo" for r in rows)
    if lay.name == "mlwe":
        parts.append("MaMBo's arrangement by construction (a refreshed linear layer runs at level 1, its refresh "
                     "the next segment's CoeffToSlot)")
    elif fused:
        parts.append(f"MaMBo on {fused} of {len(rows)} point(s)")
    else:
        plan_family = ("batched: the plan's family; ", "S2C-first single: the plan's family; ")
        reasons = []
        for r in rows:
            why = r.get("reason", "")
            for prefix in plan_family:
                why = why[len(prefix):] if why.startswith(prefix) else why
            if why and why not in reasons:
                reasons.append(why)
        parts.append("MaMBo not used: " + ("; ".join(reasons[:2]) + ("; ..." if len(reasons) > 2 else "")
                                           if reasons else f"layout {lay.label} has no PCMM to fuse into a refresh"))
    return "; ".join(parts)


def fit_batch_pipeline(lay: Layout, replan, opts: dict, limit: MemoryLimit) -> tuple[Layout, str]:
    """Layout (A) with batch_bootstrap='auto' held to a memory budget: the planner picks the batched-bootstrapping
    k by time, and k's keys grow with it (at N16-boot k = 4 holds ~11.4 GiB, imported at about twice that). When the
    plan's need (each node's peak split over nodes, else the server's) exceeds the budget, it is planned again in
    'auto' with a key budget (opts["key_budget"]) at each pipeline family's key size below the plan's, largest
    first, so that the planner takes the cheapest pipeline whose keys fit that size and its pipeline line says why;
    the first plan within the memory budget is taken. Each family's own key size as the budget, rather than one
    scaled from the plan's numbers, keeps a family that fits from being passed over for a slower one with smaller
    keys. replan(opts): the layout planned afresh with those options. Returns (layout, why: '' when `lay` is kept;
    a k the user forces is kept, for the memory check to refuse)."""
    if limit.budget is None or opts.get("batch_bootstrap") != "auto" or lay.name != "batch":
        return lay, ""
    keys = boot_key_bytes(lay)
    need = limit.need(lay, keys)
    if not limit.over(need) or batch_bootstrap.boot_batch_size(lay.steps) < 2:
        return lay, ""
    rest = limit.need(lay, 0)
    limit.need(lay, keys)               # need() sizes the layout to the keys it was given last: its own again
    sizes = family_key_sizes(lay.params)
    if limit.over(rest):                # over without any key: no keys fit; the smallest, for the fixes' sake
        sizes = sizes[-1:]
    where = f"each of {limit.nodes} node(s)" if limit.nodes is not None else "the server"
    tried, last, smallest = [f"{pipeline_label(lay)} ~{need / GIB:.3g} GiB"], keys, lay
    for budget in sizes:
        if budget >= last:
            continue
        alt = replan({**opts, "key_budget": budget})
        alt_keys = boot_key_bytes(alt)
        if alt_keys >= last:            # the same pipeline as the last one tried
            continue
        last = alt_keys
        alt_need = limit.need(alt, alt_keys)
        if not limit.over(alt_need):
            return alt, (f"bootstrapping keys held to the memory budget ({limit.budget / GIB:.3g} GiB on {where}): "
                         f"{'; '.join(tried)} over it, {pipeline_label(alt)} ~{alt_need / GIB:.3g} GiB fits")
        tried.append(f"{pipeline_label(alt)} ~{alt_need / GIB:.3g} GiB")
        smallest = alt
    if smallest is lay:
        return lay, ""
    # none fits: the smallest keys, so that the memory check's fixes (more nodes, ...) are those of the plan that
    # needs the least
    return smallest, (f"bootstrapping keys held to the memory budget ({limit.budget / GIB:.3g} GiB on {where}): "
                      f"{'; '.join(tried)}: none fits")


def family_key_sizes(params) -> list:
    """The key bytes of each bootstrapping pipeline family the planner prices (single CtS-first, S2C-first of batch
    size k), largest first: the key budgets fit_batch_pipeline tries."""
    sizes = {batch_bootstrap.family_key_bytes(params, "cts_first")}
    sizes |= {batch_bootstrap.family_key_bytes(params, "s2c_first", k) for k in FAMILY_BATCH_SIZES}
    return sorted(sizes, reverse=True)


def pipeline_label(lay: Layout) -> str:
    """A bootstrapped layout (A) plan's pipeline in a few words: "batched k=4", "single CtS-first", ..."""
    k = batch_bootstrap.boot_batch_size(lay.steps)
    if k > 1:
        return f"batched k={k}"
    return "single CtS-first" if batch_bootstrap.boot_order(lay.steps) != "s2c_first" else "single S2C-first"


def choose_bootstrapped(steps, calib, opts: dict, batch_size: int, max_key_bytes: float | None = None,
                        max_memory: int | MemoryLimit | None = None,
                        peaks: dict | None = None) -> tuple[Layout, dict, str]:
    """(the chosen layout, the estimates by layout name, why) for layout="auto", bootstrap=True and a batch size:
    layouts (A), (P) and (A′) planned with their bootstraps; the one with the lower estimate among those whose keys
    fit max_key_bytes (none fits: the one with the fewer key bytes). max_memory: a server budget in bytes or a
    MemoryLimit (split over nodes: each node's peak, bootstrapping keys held once per node); a layout over it is
    not possible (none fits a node: the one that fits on the fewest nodes is returned for compile's per-node check
    to refuse, naming that count). A layout
    that cannot run the model is listed with the reason; when none can, layout (A)'s error is raised (as
    layout='batch' would raise it). why names each layout's estimate and the chosen one's pipeline (pipeline_why).
    peaks: the values' per-row peaks on calib from a pass already made (compile's), which the planners then do not
    repeat."""
    max_key_bytes = MAX_BOOT_EVAL_KEY_BYTES if max_key_bytes is None else float(max_key_bytes)
    limit = as_limit(max_memory)
    est: dict = {}
    built: dict = {}
    keys: dict = {}
    errors: dict = {}
    over: dict = {}
    fitted: dict = {}

    def fresh():    # each planner its own steps: the planners write levels into the steps they are given (depth_of)
        return [replace(s, info=s.info.copy()) for s in steps]

    plans = ((Batch, lambda: batch_bootstrap.plan_bootstrapped(fresh(), calib, opts, batch_size, peaks)),
             (Packed, lambda: plan_packed_bootstrapped(fresh(), calib, opts, batch_size, peaks)),
             (Mlwe, lambda: plan_mlwe_bootstrapped(fresh(), calib, opts, batch_size, peaks)))
    for cls, plan in plans:
        if cls is Batch and limit.budget is not None:      # hopeless for the budget: skip planning its bootstraps
            N = Params.preset(batch_bootstrap.boot_preset(opts.get("preset"), bool(opts["allow_insecure"]))["name"]).N
            chunks = -(-int(batch_size) // (N // 2))
            floor, why = batch_memory_floor(steps, N, chunks)
            if limit.nodes is not None:     # a node holds at least its share of those ciphertexts (runtime.shards)
                p_n, p_r = shards.split_shape(limit.nodes, chunks)
                floor //= p_n * p_r
            if floor > limit.budget:
                errors[cls.name] = ResourceError(f"at least ~{floor / GIB:.3g} GiB of {limit.what} with layout "
                                                 f"{cls.name} ({why}), above {limit.budget / GIB:.3g} GiB")
                est[cls.name] = f"not possible: {errors[cls.name]}"
                continue
        try:
            BOOTSTRAPPED[cls.name][1](opts)          # the layout's check of mambo= / batch_bootstrap=
            lay = cls.plan(plan())
            if cls is Batch:
                lay, fitted[cls.name] = fit_batch_pipeline(
                    lay, lambda o: Batch.plan(batch_bootstrap.plan_bootstrapped(fresh(), calib, o, batch_size, peaks)),
                    opts, limit)
        except (UnsupportedError, ShapeError, LevelError, EncodingError) as exc:
            errors[cls.name] = exc
            est[cls.name] = f"not possible: {exc}"
            continue
        boot = boot_key_bytes(lay)
        need, key_bytes = limit.need(lay, boot), int(estimate_resources(lay).eval_key_bytes) + boot
        if limit.over(need):
            errors[cls.name] = ResourceError(f"{limit.text(need)} with layout {cls.name}")
            est[cls.name], over[cls.name] = f"not possible: {errors[cls.name]}", (need, lay, boot)
            continue
        e = lay.estimate()
        if not isinstance(e, (int, float)):        # declined for a reason other than time (its keys)
            est[cls.name] = e
            continue
        built[cls.name], est[cls.name], keys[cls.name] = lay, float(e), key_bytes
    if not built:
        if over and limit.nodes is not None:       # compile's per-node check refuses it, naming the fixes
            name = limit.closest(over)
            lay = over[name][1]
            lay.commit()
            return lay, est, f"no layout fits {limit.what}: {name} fits on the fewest nodes"
        if any(isinstance(e, ResourceError) for e in errors.values()):
            raise ResourceError(f"no layout's bootstrapped plan fits the {limit.what} budget (estimated before any "
                                "key or ciphertext exists): " + "; ".join(f"{k}: {v}" for k, v in est.items())
                                + ". Compile with a smaller batch_size, "
                                + ("more nodes (nodes=), or node_memory=<bytes> when the nodes have more memory"
                                   if limit.nodes is not None else
                                   "nodes=<count> to split the batch over several nodes, or server_memory=<bytes> "
                                   "when the server has more memory than this machine (server_memory=None: no "
                                   "limit)"))
        raise errors["batch"]
    fits = [k for k in built if keys[k] <= max_key_bytes]
    best = min(fits, key=est.get) if fits else min(built, key=keys.get)

    def line(k):
        b = batch_bootstrap.summary(built[k].steps, built[k].params, built[k].batch_size) or {}
        n = sum(r["bootstraps"] for r in b.get("placements", []))
        return (f"{built[k].label} {est[k]:.3g} s incl. {n} bootstrap call(s) ~{b.get('boot_seconds', 0.0):.3g} s, "
                f"keys ~{keys[k] / GIB:.2f} GiB")

    parts = [line(k) for k in built]
    limit_text = f"{max_key_bytes / GIB:.0f} GiB"
    if not fits:
        why = f"bootstraps included: {'; '.join(parts)}; no layout's keys fit {limit_text}: the smaller keys"
    elif len(built) == 1:
        why = (f"bootstraps included: {parts[0]}; the only layout "
               + (f"that fits {limit.what}" if over else "that bootstraps this model"))
    else:
        over_keys = [k for k in built if k not in fits]
        why = (f"bootstraps included: {'; '.join(parts)}; "
               + (f"{', '.join(over_keys)}'s keys exceed {limit_text}" if over_keys else
                  f"the cheapest, keys within {limit_text}"))
    lay = built[best]
    why += f"; {lay.label}'s pipeline: {pipeline_why(lay)}"
    if fitted.get(best):
        why += f" ({fitted[best]})"
    lay.commit()
    return lay, est, why


def _refuse(message: str, mambo_too: bool = True):
    """A layout's check of the bootstrap-pipeline options (mambo / batch_bootstrap are layout (A)'s)."""
    def check(opts):
        if (opts["mambo"] is True) or (mambo_too and opts["batch_bootstrap"] not in ("auto", False)):
            raise UnsupportedError(message)
    return check


#: per layout: its bootstrapped planner and its check of the pipeline options (one entry per layout: compile has no
#: per-layout branch)
BOOTSTRAPPED = {
    "batch": (batch_bootstrap.plan_bootstrapped, lambda opts: None),
    "packed": (plan_packed_bootstrapped, _refuse(
        "layout (P) refreshes one packed ciphertext per value with single CtS-first bootstraps: mambo=True / "
        "batch_bootstrap are layout (A) options")),
    "mlwe": (plan_mlwe_bootstrapped, _refuse(
        "layout (A') runs the linear layer before a refresh at level 1 already (MaMBo's arrangement, on "
        "coefficient-encoded values): mambo=True is a layout (A) option", mambo_too=False)),
    "blocked": (plan_blocked_bootstrapped, _refuse(
        "layout (C) refreshes its blocks with single CtS-first bootstraps: mambo=True / batch_bootstrap are layout "
        "(A) options")),
}


def plan_with_bootstraps(steps, calib, opts: dict, batch_size, budget,
                         peaks: dict | None = None) -> tuple[Layout, dict, str]:
    """The bootstrapped plan compile(..., bootstrap=True) asks for: layout (C) with encrypted weights, the layout
    named by the layout option, or with layout="auto" and a batch size the cheapest of (A), (P) and (A′)
    (choose_bootstrapped); then one memory check with the bootstrapping keys. budget: the server budget in bytes or
    a MemoryLimit (split over nodes compile checks each node's peak itself); peaks: as in choose_bootstrapped."""
    limit = as_limit(budget)
    name = "blocked" if opts["encrypted_weights"] else opts["layout"]
    if name == "auto" and batch_size is not None:
        lay, estimates, why = choose_bootstrapped(steps, calib, opts, int(batch_size), max_memory=limit,
                                                  peaks=peaks)
    else:
        name = "batch" if name == "auto" else name
        if name not in BOOTSTRAPPED:        # a layout without a bootstrap placement (docs/extending.md)
            raise UnsupportedError(f"layout {get(name).label} plans no bootstraps: compile it with bootstrap=False, "
                                   "or use layout='batch'")
        plan, check = BOOTSTRAPPED[name]
        check(opts)
        # a copy to re-plan from (the planners write levels into steps), only where fit_batch_pipeline may re-plan
        refit = name == "batch" and limit.budget is not None and opts.get("batch_bootstrap") == "auto"
        pristine = [replace(s, info=s.info.copy()) for s in steps] if refit else None
        lay, estimates, why = choose([get(name)], plan(steps, calib, opts, batch_size, peaks))
        if refit:
            lay, why = fit_batch_pipeline(lay, lambda o: choose([get(name)], plan(
                [replace(s, info=s.info.copy()) for s in pristine], calib, o, batch_size, peaks))[0], opts, limit)
    if limit.nodes is None:     # split over nodes, compile checks each node's peak (hemlp.planner.resources)
        boot = boot_key_bytes(lay)
        check_memory(lay.name, limit.need(lay, boot), limit.budget, detail=limit.detail(lay, boot))
    return lay, estimates, why
