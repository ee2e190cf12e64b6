"""Client-side key generation for bootstrapping: exactly the keys one Bootstrapper needs, each made
for the highest level it is used at (docs/design/bootstrap.md §5: "count rotation steps before key generation,
generate each key at the level of first use, share CtS/StC steps").

CtS level i (0-based) runs at level L − i, the trace at L, the real/imaginary split and EvalMod at
L − cts_depth, StC level j at L − cts_depth − evalmod_depth − j. A rotation step used by several of
these gets one key, at the highest of their levels. The conjugation key serves the split (and the
split of bootstrap_pair, lower); the relinearisation key is made for the EvalMod level; the
encapsulation keys for the top level.

    keys = BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx))
    print(keys.describe())          # one line per key: what, level, size
"""
from __future__ import annotations

import functools

from hemlp import _core
from hemlp.he import dft
from hemlp.bootstrap.modraise import EncapsulationKeys
from hemlp.bootstrap.params import BootParams
from hemlp.he.subring import subring_trace_steps
from hemlp.fhe import Context, GaloisKeys, RelinKey, SecretKey
from hemlp.errors import ContextMismatchError, MissingKeyError, ParameterError

__all__ = ["BootstrapKeys", "dft_plans", "rotation_levels", "seed_max_level"]


@functools.lru_cache(maxsize=8)
def dft_plans(slots: int, cts_depth: int, stc_depth: int) -> tuple:
    """(CoeffToSlot, SlotToCoeff) plans, bit-reversed (they must pair), cached."""
    return dft.plan_coeff_to_slot(slots, cts_depth), dft.plan_slot_to_coeff(slots, stc_depth)


def rotation_levels(ctx: Context, params: BootParams) -> dict:
    """{rotation step: the highest level the bootstrapper rotates by it at}."""
    n = params.slot_count(ctx)
    cts, stc = dft_plans(n, params.cts_depth, params.stc_depth)
    L = ctx.max_level
    need: dict = {}

    def use(steps, level):
        for s in steps:
            need[int(s)] = max(need.get(int(s), -1), level)

    use(subring_trace_steps(ctx.N, n), L)
    for i, lt in enumerate(cts.levels):
        use(lt.steps, L - i)
    top_stc = L - params.cts_depth - params.evalmod_depth
    for j, lt in enumerate(stc.levels):
        use(lt.steps, top_stc - j)
    need.pop(0, None)
    return need


def seed_max_level(ctx: Context, params: BootParams, seeded) -> int:
    """The highest key level whose Galois keys are held seeded: "auto" the last CoeffToSlot level
    (L - cts_depth + 1: the keys used there and in SlotToCoeff), True every level, False none (-1)."""
    if seeded is True:
        return ctx.max_level
    if seeded is False:
        return -1
    if seeded == "auto":
        return ctx.max_level - params.cts_depth + 1
    raise ParameterError(f"seeded must be True, False or 'auto', got {seeded!r}")


class BootstrapKeys:
    """Galois keys (rotations + conjugation), relinearisation key and encapsulation keys of one
    bootstrapper, with the parameters they were made for."""

    def __init__(self, params: BootParams, galois: GaloisKeys, relin: RelinKey, encapsulation: EncapsulationKeys,
                 levels: dict, conj_level: int):
        self.params, self.galois, self.relin, self.encapsulation = params, galois, relin, encapsulation
        self.rotation_levels, self.conj_level = dict(levels), conj_level

    @classmethod
    def generate(cls, ctx: Context, sk: SecretKey, params: BootParams | None = None,
                 seeded="auto") -> "BootstrapKeys":
        """seeded: which Galois keys hold their a-halves as seeds only, expanded on use by each key switch
        (half of that key's memory, for one AES-CTR pass over it per use): "auto" (default) the keys used at
        the last CoeffToSlot level or lower (at N16-boot 1.2 GiB less: peak RSS 9.6-9.7 GiB instead of 10.8),
        True every Galois key (3.1 GiB less), False none. See seed_max_level. The time cost is one expansion per
        key use; it was only measured on a loaded machine (N = 2^14, every key seeded: about +30 % wall time,
        so "auto" seeds the keys of the cheaper, lower levels only)."""
        params = BootParams.for_context(ctx) if params is None else params
        params.validate(ctx)
        ctx.unwrap(sk, SecretKey, "secret key")
        levels = rotation_levels(ctx, params)
        em_level = ctx.max_level - params.cts_depth
        e = ctx.native
        elements = [(e.conjugation_element(), em_level)]
        elements += [(e.galois_element(int(s)), lv) for s, lv in sorted(levels.items())]
        galois = ctx.wrap(GaloisKeys, _core.galois_keys_at_levels(e, ctx.unwrap(sk, SecretKey, "secret key"), elements,
                                                                      seed_max_level(ctx, params, seeded)))
        relin = ctx.relin_key(sk, level=em_level)
        enc = EncapsulationKeys(ctx, sk, h=params.h, level=ctx.max_level)
        return cls(params, galois, relin, enc, levels, em_level)

    @property
    def nbytes(self) -> int:
        """Bytes of key material as serialised (the switching keys' a-halves are seeds)."""
        return self.galois.nbytes + self.relin.nbytes + self.encapsulation.nbytes

    @property
    def memory_bytes(self) -> int:
        """Bytes held in memory: nbytes plus every a-half held expanded (the relinearisation key's; the
        Galois keys' too unless they are seeded)."""
        return self.galois.memory_bytes + self.relin.memory_bytes + self.encapsulation.nbytes

    def check(self, ctx: Context) -> None:
        """MissingKeyError naming the first missing key; ContextMismatchError for another parameter set."""
        for what, k in (("Galois keys", self.galois), ("relinearisation key", self.relin)):
            if k is None:
                raise MissingKeyError(f"bootstrapping needs its {what}: BootstrapKeys.generate(ctx, sk, params)")
            if k.param_hash != ctx.hash:
                raise ContextMismatchError(f"the bootstrapping {what} belong to another parameter set")
        if not isinstance(self.encapsulation, EncapsulationKeys):
            raise MissingKeyError("bootstrapping needs the encapsulation keys: BootstrapKeys.generate(ctx, sk)")
        have = self.galois.levels
        for s, lv in sorted(self.rotation_levels.items()):
            g = ctx.native.galois_element(int(s))
            if g not in have or have[g] < lv:
                raise MissingKeyError(f"bootstrapping needs a rotation key for step {s} at level >= {lv}"
                                      + ("" if g not in have else f" (the one given is for level {have[g]})"))
        g = ctx.native.conjugation_element()
        if g not in have or have[g] < self.conj_level:
            raise MissingKeyError(f"bootstrapping needs the conjugation key at level >= {self.conj_level}")
        if self.relin.level < self.conj_level:
            raise MissingKeyError(f"bootstrapping needs a relinearisation key for level {self.conj_level} "
                                  f"(EvalMod's first level); the one given is for level {self.relin.level}")

    # ---- serialisation (one checksummed hemlp container: the Galois and relinearisation keys in their own
    # serialised form, the encapsulation keys' four polynomials, and the parameters they were made for)
    def to_bytes(self, ctx: Context) -> bytes:
        from dataclasses import asdict

        import numpy as np

        from hemlp.fhe import serialize as ser

        enc_header, enc_arrays = self.encapsulation.export(ctx)
        header = dict(params=asdict(self.params), rotation_levels={str(k): v for k, v in self.rotation_levels.items()},
                      conj_level=self.conj_level, encapsulation=enc_header)
        arrays = [np.frombuffer(self.galois.to_bytes(), np.uint8), np.frombuffer(self.relin.to_bytes(), np.uint8)]
        return ser.pack("bootstrap_keys", ctx.hash, header, arrays + enc_arrays)

    def save(self, path, ctx: Context) -> None:
        from pathlib import Path

        Path(path).write_bytes(self.to_bytes(ctx))

    @classmethod
    def from_bytes(cls, data, ctx: Context, seeded="auto", checksum: bool = True) -> "BootstrapKeys":
        """data: bytes or any buffer (a mapped file: load), read in place; each key is imported once, into its
        native object. seeded: as in generate (the a-halves travel as seeds either way). checksum=False: nested in
        a container whose checksum was checked (the eval keys)."""
        from hemlp.fhe import serialize as ser

        if checksum:
            with ser.reading(data, "bootstrap_keys", ctx.hash) as (_, _, h, arrays):
                return cls._from_parsed(h, arrays, ctx, seeded)
        _, _, h, arrays = ser.unpack(data, ctx.hash, "bootstrap_keys", copy=False, checksum=False)
        return cls._from_parsed(h, arrays, ctx, seeded)

    @classmethod
    def _from_parsed(cls, h: dict, arrays: list, ctx: Context, seeded) -> "BootstrapKeys":
        """The keys of a parsed container (arrays: views of its bytes, which must outlive this call only)."""
        from hemlp import fhe
        from hemlp.fhe import serialize as ser
        from hemlp.errors import SerializationError

        if len(arrays) != 6:
            raise SerializationError("bootstrap keys: expected 6 arrays; the data is corrupted")
        try:
            params = BootParams(**ser.field(h, "params", dict))
            levels = {int(k): int(v) for k, v in ser.field(h, "rotation_levels", dict).items()}
        except (TypeError, ValueError) as exc:
            if type(exc).__module__ == "hemlp.errors":
                raise
            raise SerializationError(f"bootstrap keys: malformed header ({exc})") from None
        # the Galois keys of the lower levels are imported seeded (as generated): never expanded here
        galois = fhe.from_bytes(memoryview(arrays[0]), ctx, checksum=False,
                                seed_max_level=seed_max_level(ctx, params, seeded))
        relin = fhe.from_bytes(memoryview(arrays[1]), ctx, checksum=False)
        if not isinstance(galois, GaloisKeys) or not isinstance(relin, RelinKey):
            raise SerializationError("bootstrap keys: the embedded keys have the wrong types; the data is corrupted")
        enc = EncapsulationKeys.restore(ctx, ser.field(h, "encapsulation", dict), arrays[2:])
        return cls(params, galois, relin, enc, levels, ser.field(h, "conj_level", int))

    @classmethod
    def load(cls, path, ctx: Context, seeded="auto") -> "BootstrapKeys":
        from hemlp.fhe.files import map_file

        with map_file(path, "bootstrap keys") as data:
            return cls.from_bytes(data, ctx, seeded)

    def describe(self, ctx: Context) -> str:
        """The key listing, one line per key, with serialised sizes (a-halves as seeds)."""
        mib = 2.0 ** -20
        rows = [f"bootstrapping keys for {ctx.params.name}: {len(self.rotation_levels)} rotations, conjugation, "
                f"relinearisation, encapsulation"]
        for s, lv in sorted(self.rotation_levels.items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append(f"  rotate {s:>7d}  level {lv:2d}  {ctx.params.switch_key_bytes(lv) * mib:8.1f} MiB")
        rows.append(f"  conjugate         level {self.conj_level:2d}  "
                    f"{ctx.params.switch_key_bytes(self.conj_level) * mib:8.1f} MiB")
        rows.append(f"  relinearise       level {self.relin.level:2d}  {self.relin.nbytes * mib:8.1f} MiB")
        rows.append(f"  encapsulation     h={self.encapsulation.hamming_weight:<3d} level {self.encapsulation.level:2d}  "
                    f"{self.encapsulation.nbytes * mib:8.1f} MiB (in memory)")
        rows.append(f"  total: {self.nbytes * mib:.1f} MiB serialised, {self.memory_bytes * mib:.1f} MiB in memory "
                    "(a seeded key's a-halves are expanded on use)")
        return "\n".join(rows)
