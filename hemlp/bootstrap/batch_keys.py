"""The evaluation keys of batched bootstrapping and MaMBo (BatchBootstrapKeys): generation, their memory (an
estimate for any k, before generating them, and the k that fits a budget) and serialisation.

    keys = BatchBootstrapKeys.generate(ctx, sk, k, params)        # client side
    keys.save(path, ctx); BatchBootstrapKeys.load(path, ctx)       # one checksummed container (docs/formats.md)
    estimate_bytes(ctx, k, params)                                 # bytes in memory, before generating
    choose_k(ctx, budget_bytes, params)                            # the largest k whose keys + working set fit

Memory (N16-boot, per CtS rotation key of level l: num_digits(l)·(l+1+|P|)·N words per polynomial): the batched
CoeffToSlot keys hold, per digit, one shared a-part and k b-parts. The a-parts are uniform and sampled directly in
NTT form, so a seeded key keeps only their 32-byte seeds and expands them on each use (one AES-CTR pass; the
b-parts depend on the secrets and stay): k polynomials per digit instead of k+1 (at k = 4: 10.7 GiB instead of
13.4). The RLWE keys are made for only the levels they are used at, for the chosen order: CtS-first runs
SlotToCoeff near the middle of the chain (levels L-cts-evalmod down), S2C-first (MaMBo) at the bottom (stc_depth+1
limbs and fewer: ~0.02 GiB instead of 2.3 GiB expanded at N16-boot); seeded, they too hold b-halves only.
"""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from hemlp import _core
from hemlp.bootstrap.keys import dft_plans
from hemlp.bootstrap.params import BootParams
from hemlp.errors import (ContextMismatchError, HemlpError, KeyMismatchError, MissingKeyError, ParameterError,
                          SerializationError, ShapeError)
from hemlp.fhe import Context, GaloisKeys, RelinKey, SecretKey
from hemlp.fhe import serialize as ser
from hemlp.pcmm import MultiSecretKey, multi_secret_key

__all__ = ["BatchBootstrapKeys", "batched_cts_levels", "stc_levels", "estimate_bytes", "working_bytes",
           "choose_k", "key_breakdown"]

GIB = 2.0 ** 30


def _chain(ctx_or_params):
    """(scheme Params, max level, slots) of a Context or of a hemlp.fhe.Params (full packing)."""
    p = getattr(ctx_or_params, "params", ctx_or_params)
    return p, int(p.max_level), int(p.N) // 2


def batched_cts_levels(ctx, params: BootParams) -> dict:
    """{CoeffToSlot rotation step: the highest level the batched CtS rotates by it at}."""
    _, L, slots = _chain(ctx)
    n = slots if params.slots is None else int(params.slots)
    cts, _ = dft_plans(n, params.cts_depth, params.stc_depth)
    need: dict = {}
    for i, lt in enumerate(cts.levels):
        for s in lt.steps:
            need[int(s)] = max(need.get(int(s), -1), L - i)
    need.pop(0, None)
    return need


def stc_levels(ctx, params: BootParams) -> dict:
    """{SlotToCoeff rotation step: the highest level it is used at} for params.order: CtS-first runs SlotToCoeff
    after EvalMod (level L - cts_depth - evalmod_depth down), S2C-first at the bottom (from stc_depth + 1: MaMBo's
    inputs to its level-1 PCMM; bootstrap_batch starts at stc_depth)."""
    _, L, slots = _chain(ctx)
    n = slots if params.slots is None else int(params.slots)
    _, stc = dft_plans(n, params.cts_depth, params.stc_depth)
    top = params.stc_depth + 1 if params.order == "s2c_first" else L - params.cts_depth - params.evalmod_depth
    need: dict = {}
    for j, lt in enumerate(stc.levels):
        for s in lt.steps:
            need[int(s)] = max(need.get(int(s), -1), top - j)
    need.pop(0, None)
    return need


def key_breakdown(ctx, k: int, params: BootParams | None = None, seeded: bool = True) -> dict:
    """Bytes in memory of BatchBootstrapKeys.generate(ctx, sk, k, params, seeded) by part, computed from the
    parameters alone (no key is generated): {"cts": batched CtS rotations, "stc": RLWE SlotToCoeff rotations and
    the conjugation, "conversion": RLWE <-> MSRLWE and ModRaise keys, "relin": relinearisation, "total"}.
    ctx: a Context or a hemlp.fhe.Params."""
    p, L, _ = _chain(ctx)
    bp = _params(ctx, params)
    k = int(k)
    swk = p.switch_key_bytes
    words = p.N * 8
    em = L - bp.cts_depth
    a_part = 0 if seeded else 1
    cts = sum(swk(lv) for lv in batched_cts_levels(ctx, bp).values()) * (k + a_part)
    stc = (sum(swk(lv) for lv in stc_levels(ctx, bp).values()) + swk(em)) * (1 + a_part)
    conv = ((k + 1) * (L + 1 + len(p.p)) * words            # ModRaise's A, B_1..B_k over Q_L ∪ P
            + (k + k * k) * 2 * words                       # the {q0, p0} keys
            + k * swk(em) * (1 + a_part))                   # MSRLWE -> RLWE at EvalMod's level
    relin = 2 * swk(em)                                     # held expanded (one key: not worth seeding)
    return {"cts": cts, "stc": stc, "conversion": conv, "relin": relin, "total": cts + stc + conv + relin}


def estimate_bytes(ctx, k: int, params: BootParams | None = None, seeded: bool = True) -> int:
    """Bytes BatchBootstrapKeys.generate(ctx, sk, k, params, seeded) holds in memory (key_breakdown's total;
    equal to the generated keys' memory_bytes, checked in tests)."""
    return key_breakdown(ctx, k, params, seeded)["total"]


def working_bytes(ctx, k: int, params: BootParams | None = None) -> int:
    """An estimate of the batched pipeline's working set beside its keys: the batched CoeffToSlot's encoded
    diagonals (over Q_l ∪ P, kept by the bootstrapper), SlotToCoeff's (over Q_l) and the MSRLWE temporaries of one
    batched rotation (the shared a's ModUp digits and k + 1 accumulators over Q_L ∪ P, the input and output groups),
    plus the k RLWE ciphertexts EvalMod runs on at its level."""
    p, L, slots = _chain(ctx)
    bp = _params(ctx, params)
    n = slots if bp.slots is None else int(bp.slots)
    cts, stc = dft_plans(n, bp.cts_depth, bp.stc_depth)
    K, words = len(p.p), p.N * 8
    diag = sum(len(lt.diags) * (L - i + 1 + K) for i, lt in enumerate(cts.levels)) * words
    stc_top = bp.stc_depth + 1 if bp.order == "s2c_first" else L - bp.cts_depth - bp.evalmod_depth
    diag += sum(len(lt.diags) * (stc_top - j + 1) for j, lt in enumerate(stc.levels)) * words
    digits = math.ceil((L + 1) / max(1, int(getattr(p, "alpha", 1))))
    temp = (2 * digits + 3 * (k + 1)) * (L + 1 + K) * words  # + the seeded a-parts' expansion buffers
    evalmod = k * 8 * (L - bp.cts_depth + 1) * words       # a few ciphertexts per input at EvalMod's level
    # the count above misses the allocator's slack and smaller temporaries: measured peak RSS beyond the keys at
    # test-N12-boot 0.112 / 0.129 GiB for k = 4 / 8 against 0.088 / 0.109 counted, so 1.3x
    return int(1.3 * (diag + temp + evalmod))


def choose_k(ctx, budget_bytes: float, params: BootParams | None = None, candidates=(16, 8, 4, 2),
             seeded: bool = True, reserved_bytes: float = 0) -> tuple:
    """(k, report): the largest candidate k whose keys (estimate_bytes) plus working set (working_bytes) plus
    reserved_bytes fit budget_bytes, or k = 1 (single bootstraps) when none does; report lists every candidate's
    estimate and says why k was chosen."""
    rows, chosen = [], 1
    for k in sorted({int(c) for c in candidates}, reverse=True):
        keys, work = estimate_bytes(ctx, k, params, seeded), working_bytes(ctx, k, params)
        fits = keys + work + reserved_bytes <= budget_bytes
        rows.append({"k": k, "key_gib": keys / GIB, "working_gib": work / GIB, "fits": fits})
        if fits and chosen == 1:
            chosen = k
    why = (f"k = {chosen}: keys {rows[[r['k'] for r in rows].index(chosen)]['key_gib']:.1f} GiB + working set "
           f"within {budget_bytes / GIB:.1f} GiB" if chosen > 1 else
           f"no batch size fits {budget_bytes / GIB:.1f} GiB: single bootstraps")
    skipped = [f"k = {r['k']} needs {r['key_gib'] + r['working_gib']:.1f} GiB" for r in rows if not r["fits"]]
    return chosen, {"k": chosen, "budget_gib": budget_bytes / GIB, "seeded": seeded, "candidates": rows,
                    "reason": why + ("" if not skipped else " (" + "; ".join(skipped) + ")")}


def _params(ctx, params):
    if params is not None:
        return params
    if isinstance(ctx, Context):
        return BootParams.for_context(ctx)
    from hemlp.bootstrap.params import PRESET_DEPTHS

    cts, stc = PRESET_DEPTHS.get(getattr(ctx, "name", ""), (None, None))
    if cts is None:
        raise ParameterError(f"no bootstrapping defaults for {getattr(ctx, 'name', ctx)!r}: pass params")
    return BootParams(cts_depth=cts, stc_depth=stc)


class BatchBootstrapKeys:
    """The evaluation keys of a BatchBootstrapper / MamboBootstrapper for batches of exactly k ciphertexts:
    - conversion: RLWE→MSRLWE + encapsulation over {q0, p0} (k² + k polynomials of 2 limbs), the 1-digit
      s'_j → s_j keys at the top (k+1 polynomials) and the MSRLWE→RLWE keys at EvalMod's level (k keys);
    - ms_galois: CoeffToSlot rotations, each with a shared a-part and k b-parts, at its highest level;
    - galois / relin: RLWE keys of SlotToCoeff (at the levels of params.order), the conjugation and
      relinearisation at EvalMod's level."""

    def __init__(self, params: BootParams, k: int, conversion, ms_galois, galois: GaloisKeys, relin: RelinKey,
                 cts_levels: dict, stc_levels: dict, conj_level: int, param_hash):
        self.params, self.k = params, int(k)
        self.conversion, self.ms_galois, self.galois, self.relin = conversion, ms_galois, galois, relin
        self.cts_levels, self.stc_levels, self.conj_level = dict(cts_levels), dict(stc_levels), conj_level
        self.param_hash = param_hash

    @classmethod
    def generate(cls, ctx: Context, sk: SecretKey, k: int, params: BootParams | None = None,
                 msk: MultiSecretKey | None = None, seeded: bool = True) -> "BatchBootstrapKeys":
        """Client side. msk: the k dense secrets the batch is raised under (a fresh one when None; pass one
        only to inspect intermediate MSRLWE ciphertexts in tests). seeded: the keys' uniform a-parts are held as
        seeds and expanded on each use (the batched CtS keys' shared a-parts, the RLWE rotation and back-conversion
        keys' a-halves): estimate_bytes(ctx, k, params, seeded) in memory; the results are bit-identical."""
        params = BootParams.for_context(ctx) if params is None else params
        params.validate(ctx)
        if params.slot_count(ctx) != ctx.slots:
            raise NotImplementedError("batched bootstrapping supports full packing (n = N/2) only: sparse packing "
                                      "needs the subring trace on MSRLWE ciphertexts, not implemented")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
            raise ShapeError(f"batched bootstrapping needs k >= 1 ciphertexts per batch, got {k!r}")
        native_sk = ctx.unwrap(sk, SecretKey, "secret key")
        if msk is None:
            msk = multi_secret_key(ctx, int(k))
        if not isinstance(msk, MultiSecretKey) or msk.k != int(k):
            raise KeyMismatchError(f"the multi-secret key must hold exactly k = {k} secrets")
        e, L = ctx.native, ctx.max_level
        em_level = L - params.cts_depth
        seed_level = L if seeded else -1
        conv = _core.batch_conversion_keys(e, native_sk, msk.native, int(params.h), L, em_level, bool(seeded))
        cts_levels = batched_cts_levels(ctx, params)
        ms_galois = _core.ms_galois_keys(e, msk.native, [(e.galois_element(s), lv) for s, lv in sorted(cts_levels.items())],
                                         seed_level)
        stc = stc_levels(ctx, params)
        elements = [(e.conjugation_element(), em_level)]
        elements += [(e.galois_element(s), lv) for s, lv in sorted(stc.items())]
        galois = ctx.wrap(GaloisKeys, _core.galois_keys_at_levels(e, native_sk, elements, seed_level))
        relin = ctx.relin_key(sk, level=em_level)
        return cls(params, k, conv, ms_galois, galois, relin, cts_levels, stc, em_level, ctx.hash)

    @property
    def memory_bytes(self) -> int:
        """Bytes held in memory (estimate_bytes before generating)."""
        return self.conversion.nbytes + self.ms_galois.nbytes + self.galois.memory_bytes + self.relin.memory_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of key material as serialised (every uniform part a seed)."""
        return (self.ms_galois.serialised_nbytes + self.conversion.serialised_nbytes + self.galois.nbytes
                + self.relin.nbytes)

    def describe(self) -> str:
        mib = 2.0 ** -20
        return (f"batch bootstrapping keys, k = {self.k} ({self.params.order}): conversion "
                f"{self.conversion.nbytes * mib:.1f} MiB, batched CtS rotations ({len(self.cts_levels)}"
                f"{', seeded' if self.ms_galois.seeded else ''}) {self.ms_galois.nbytes * mib:.1f} MiB, RLWE "
                f"rotations/conjugation ({len(self.stc_levels) + 1}) {self.galois.memory_bytes * mib:.1f} MiB, "
                f"relinearisation {self.relin.memory_bytes * mib:.1f} MiB; total {self.memory_bytes * mib:.1f} MiB "
                "in memory")

    def check_context(self, ctx: Context) -> None:
        if self.param_hash != ctx.hash:
            raise ContextMismatchError("the batch bootstrapping keys belong to another parameter set than this "
                                       "context")

    # ---- serialisation: one checksummed container of type "batch_bootstrap_keys" (docs/formats.md)
    def to_parts(self, ctx: Context) -> list:
        """The container as a list of buffers (the key polynomials are views of the native memory: no copy)."""
        self.check_context(ctx)
        e = ctx.native
        meta, sa_seeds, small_beta, big_a_seed, big_b, back = _core.export_batch_conversion_keys(e, self.conversion)
        records = _core.export_ms_galois_keys(e, self.ms_galois)
        conversion = {"key_id": f"{meta['key_id']:016x}", "ms_key_id": f"{meta['ms_key_id']:016x}",
                      "sparse_id": f"{meta['sparse_id']:016x}", "hamming_weight": meta["hamming_weight"],
                      "level": meta["level"], "back_level": meta["back_level"],
                      "small_alpha_seeds": [s.hex() for s in sa_seeds], "big_a_seed": big_a_seed.hex(),
                      "back_seeds": [[s.hex() for s in seeds] for _, seeds in back]}
        ms = {"ms_key_id": f"{self.ms_galois.ms_key_id:016x}",
              "keys": [[int(g), int(lv), [s.hex() for s in seeds]] for g, lv, seeds, _ in records]}
        header = dict(params=asdict(self.params), k=self.k, cts_levels={str(s): v for s, v in self.cts_levels.items()},
                      stc_levels={str(s): v for s, v in self.stc_levels.items()}, conj_level=self.conj_level,
                      conversion=conversion, ms_galois=ms)
        arrays = [np.frombuffer(self.galois.to_bytes(), np.uint8), np.frombuffer(self.relin.to_bytes(), np.uint8)]
        arrays += list(small_beta) + list(big_b)
        for bs, _ in back:
            arrays += list(bs)
        for _, _, _, beta in records:
            for digits in beta:
                arrays += list(digits)
        return ser.pack_parts("batch_bootstrap_keys", ctx.hash, header, arrays)

    def to_bytes(self, ctx: Context) -> bytes:
        return b"".join(self.to_parts(ctx))

    def save(self, path, ctx: Context) -> None:
        from hemlp.fhe.files import write_atomic

        write_atomic(path, self.to_parts(ctx))   # the parts one after the other: never the whole file in memory

    @classmethod
    def from_bytes(cls, data, ctx: Context, seeded: bool = True, checksum: bool = True) -> "BatchBootstrapKeys":
        """Keys saved with to_bytes / save into the context they were made under (ContextMismatchError otherwise;
        SerializationError for truncated, corrupted or malformed data). seeded: as in generate. checksum=False:
        nested in a container whose checksum was checked (the eval keys)."""
        if checksum:
            with ser.reading(data, "batch_bootstrap_keys", ctx.hash) as (_, _, h, arrays):
                return cls._from_parsed(h, arrays, ctx, seeded)
        _, _, h, arrays = ser.unpack(data, ctx.hash, "batch_bootstrap_keys", copy=False, checksum=False)
        return cls._from_parsed(h, arrays, ctx, seeded)

    @classmethod
    def _from_parsed(cls, h: dict, arrays: list, ctx: Context, seeded: bool) -> "BatchBootstrapKeys":
        from hemlp import fhe

        try:
            params = BootParams(**ser.field(h, "params", dict))
            k = ser.field(h, "k", int)
            if k < 1:
                raise ValueError(f"k = {k}")
            cts_levels = {int(s): int(v) for s, v in ser.field(h, "cts_levels", dict).items()}
            stc = {int(s): int(v) for s, v in ser.field(h, "stc_levels", dict).items()}
            conj_level = ser.field(h, "conj_level", int)
            c = ser.field(h, "conversion", dict)
            ms = ser.field(h, "ms_galois", dict)
            ids = {name: int(ser.field(c, name, str), 16) for name in ("key_id", "ms_key_id", "sparse_id")}
            ms_key_id = int(ser.field(ms, "ms_key_id", str), 16)
            small_seeds = [bytes.fromhex(s) for s in ser.field(c, "small_alpha_seeds", list)]
            big_a_seed = bytes.fromhex(ser.field(c, "big_a_seed", str))
            back_seeds = [[bytes.fromhex(s) for s in seeds] for seeds in ser.field(c, "back_seeds", list)]
            ms_keys = [(int(g), int(lv), [bytes.fromhex(s) for s in seeds]) for g, lv, seeds in
                       ser.field(ms, "keys", list)]
            back_level, level = ser.field(c, "back_level", int), ser.field(c, "level", int)
            if not 0 <= back_level <= ctx.max_level or any(not 0 <= lv <= ctx.max_level for _, lv, _ in ms_keys):
                raise ValueError("a key level outside this context's chain")
            if any(not 0 < g < 2 * ctx.N or g % 2 == 0 for g, _, _ in ms_keys):
                raise ValueError("a Galois element outside the odd residues below 2N")
            seeds = [*small_seeds, big_a_seed, *(s for ss in back_seeds for s in ss),
                     *(s for _, _, ss in ms_keys for s in ss)]
            if any(len(s) != 32 for s in seeds) or any(not 0 <= v < 2 ** 64 for v in ids.values()):
                raise ValueError("a seed that is not 32 bytes or a key id that is not 64 bits")
            back_digits = ctx.params.native.num_digits(back_level)
            counts = [2, k * k, k, k * back_digits, sum(k * ctx.params.native.num_digits(lv) for _, lv, _ in ms_keys)]
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, HemlpError):
                raise
            raise SerializationError(f"batch bootstrap keys: malformed header ({exc}); the data is corrupted") from None
        if len(arrays) != sum(counts) or len(back_seeds) != k or any(len(s) != back_digits for s in back_seeds):
            raise SerializationError(f"batch bootstrap keys: {len(arrays)} arrays where the header describes "
                                     f"{sum(counts)}; the data is corrupted")
        seed_level = ctx.max_level if seeded else -1
        galois = fhe.from_bytes(memoryview(arrays[0]), ctx, checksum=False, seed_max_level=seed_level)
        relin = fhe.from_bytes(memoryview(arrays[1]), ctx, checksum=False)
        if not isinstance(galois, GaloisKeys) or not isinstance(relin, RelinKey):
            raise SerializationError("batch bootstrap keys: the embedded keys have the wrong types; the data is "
                                     "corrupted")
        pos = 2
        small_beta = list(arrays[pos:pos + k * k])
        pos += k * k
        big_b = list(arrays[pos:pos + k])
        pos += k
        back = []
        for seeds in back_seeds:
            back.append((list(arrays[pos:pos + back_digits]), seeds))
            pos += back_digits
        records = []
        for g, lv, seeds in ms_keys:
            d = ctx.params.native.num_digits(lv)
            beta = []
            for _ in range(k):
                beta.append(list(arrays[pos:pos + d]))
                pos += d
            records.append((g, lv, seeds, beta))
        try:
            conv = _core.import_batch_conversion_keys(ctx.native, ids["key_id"], ids["ms_key_id"], ids["sparse_id"], k,
                                                      ser.field(c, "hamming_weight", int), level, back_level,
                                                      small_seeds, small_beta, big_a_seed, big_b, back, bool(seeded))
            ms_galois = _core.import_ms_galois_keys(ctx.native, ms_key_id, k, records, seed_level)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, HemlpError):
                raise
            raise SerializationError(f"batch bootstrap keys: invalid data ({exc})") from None
        if ms_key_id != ids["ms_key_id"]:
            raise SerializationError("batch bootstrap keys: the CtS and conversion keys name different multi-secret "
                                     "keys; the data is corrupted")
        return cls(params, k, conv, ms_galois, galois, relin, cts_levels, stc, conj_level, ctx.hash)

    @classmethod
    def load(cls, path, ctx: Context, seeded: bool = True) -> "BatchBootstrapKeys":
        from hemlp.fhe.files import map_file

        with map_file(path, "batch bootstrap keys") as data:
            return cls.from_bytes(data, ctx, seeded)

    def check(self, ctx: Context) -> None:
        """MissingKeyError / ContextMismatchError for keys that cannot serve ctx."""
        self.check_context(ctx)
        for what, key in (("batched CtS keys", self.ms_galois), ("conversion keys", self.conversion),
                          ("Galois keys", self.galois), ("relinearisation key", self.relin)):
            if key is None:
                raise MissingKeyError(f"batched bootstrapping needs its {what}: BatchBootstrapKeys.generate(ctx, sk, k)")
