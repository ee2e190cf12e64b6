"""The planner's costs as data that ships with the package and adapts to the machine (issue #29, item 2).

A ``CostProfile`` holds everything the planner prices plans with, at one thread:

* ``unit_costs``: seconds per (ring degree x limbs), or x key-switch units for rotations and ciphertext products
  (hemlp.planner.keyswitch_cost), of the ops the layouts run (hemlp.planner.layouts.unit_costs),
  each with the way it was obtained (``unit_cost_sources``: measured from which run, or derived and how);
* ``bootstrap``: single-bootstrap times per preset and thread count (hemlp.planner.bootstrap_placement);
* ``batch_runs``: the batched-bootstrapping / MaMBo ratios of each ``python -m hemlp.bench mambo`` run
  (hemlp.planner.bootstrap_lowering);
* ``ring_factors`` (optional): per ring degree, how much dearer per unit its ops run than the unit costs say
  (``RingFactors``: measured by ``hemlp calibrate --boot``; hemlp.planner.layouts.unit_costs applies them).

Profiles are JSON files (schema ``hemlp-cost-profile/3``). ``active_profile()`` picks, in this order:

1. ``HEMLP_COST_PROFILE``: ``packaged:<simd path>`` (a packaged table) or the path of a profile file; ``auto`` or
   empty: the rules below (tests pin ``packaged:avx512``, the tables the checkout's bench/ measured);
2. the profile ``hemlp calibrate`` wrote for this machine's CPU model and SIMD path in the user cache directory
   (``$HEMLP_CACHE_DIR``, else ``$XDG_CACHE_HOME/hemlp``, else ``~/.cache/hemlp``; file
   ``cost_profiles/<cpu>__<simd>.json``);
3. the packaged table of this SIMD path (hemlp/planner/cost_tables/<simd>.json, written by scripts/cost_tables.py
   from bench/*.json), else the nearest packaged one. The profile's ``source`` says which, and the plan prints it.

A profile that cannot be read (corrupted, another schema version, missing figures) raises SerializationError naming
the file and the fix; it is never skipped silently. Pure Python: the machine's CPU model and SIMD path come from
hemlp.machine (a foundation module) unless the caller passes them.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from hemlp.errors import ParameterError, SerializationError
from hemlp.planner.keyswitch_cost import hoisted_units, keyswitch_units

__all__ = ["SCHEMA", "SCHEMA_V2", "v2_keyswitch_factors", "UNIT_COSTS", "PROFILE_ENV", "CACHE_ENV", "SIMD_ORDER",
           "TABLES", "BootMeasurement", "BatchRun", "RingFactors", "CostProfile", "active_profile",
           "reset_profile_cache", "packaged_profile", "packaged_for", "packaged_paths", "load_profile", "save_profile",
           "cache_dir", "user_profile_path"]

#: /2: ``encode`` became an encoding's level-independent part (per ring coefficient) beside ``encode_limb`` (per
#: N * limbs); a /1 profile priced every encoding as one at N14-d6's fresh level. /3: ``rotate``, ``rotate_hoisted``
#: and ``ct_mul`` are seconds per N * key-switch units (hemlp.planner.keyswitch_cost), no longer per N * limbs (a /2
#: profile is read with them converted: v2_keyswitch_factors)
SCHEMA = "hemlp-cost-profile/3"
#: the unit costs every profile has (seconds per N * limbs; the key-switching ``rotate``, ``rotate_hoisted`` and
#: ``ct_mul`` per N * key-switch units; ``encode`` per ring coefficient, ``touch`` per byte)
UNIT_COSTS = ("rotate", "rotate_hoisted", "ct_mul", "pt_mul", "rescale", "pcmm_mac", "encrypt", "mlwe_mac", "encode",
              "encode_limb", "touch")
SCHEMA_V2 = "hemlp-cost-profile/2"
PROFILE_ENV = "HEMLP_COST_PROFILE"
CACHE_ENV = "HEMLP_CACHE_DIR"
#: the SIMD paths of the native core, fastest first: "nearest" packaged table means nearest in this order
SIMD_ORDER = ("avx512", "avx2", "scalar")
TABLES = Path(__file__).resolve().parent / "cost_tables"
FIX = ("rerun `hemlp calibrate` (it measures this machine and writes the profile again) or delete the file (the "
       "planner then uses the packaged table)")


@dataclass(frozen=True)
class BootMeasurement:
    """One preset's single bootstrap (CtS-first) at `threads`: seconds per bootstrap and per pair of real
    ciphertexts, the chain length it was measured on (max_level) and its worst-case precision."""

    preset: str
    N: int
    max_level: int
    threads: int
    seconds: float
    pair_seconds: Optional[float]
    precision_bits: Optional[float]
    source: str


@dataclass(frozen=True)
class BatchRun:
    """One ``python -m hemlp.bench mambo`` run: rho[k] = S2C-first batch of k / (k single bootstraps) in CPU time,
    the S2C-first keys' bytes per k and the single bootstrap's, bits[k] = (S2C batch, pcmm_bootstrap) precision
    minus the single bootstrap's. name: what the plan cites (e.g. bench/mambo_N16.json); derived: '' when measured,
    else how the figures were obtained."""

    name: str
    preset: str
    N: int
    threads: int
    date: str
    rho: dict
    key_bytes: dict
    single_key_bytes: int
    bits: dict = field(default_factory=dict)
    derived: str = ""


@dataclass(frozen=True)
class RingFactors:
    """How much dearer per unit this machine runs the ops of ring degree N than those the unit costs were measured
    on (N14-d6's fresh level): {unit cost: factor}, each the median over a few of the ring's levels of its measured
    seconds per unit over the unit cost, both from one calibrate run (a same-run ratio: the larger ring's memory
    traffic, which no count of limbs or key-switch units holds). source: the run and the levels."""

    N: int
    factors: dict
    source: str


@dataclass(frozen=True)
class CostProfile:
    """The costs one machine (CPU model, SIMD path) plans with; see the module doc. description: where the figures
    come from (stored in the file); source: which file this copy was loaded from and why it was chosen."""

    cpu_model: str
    simd_path: str
    unit_costs: dict
    unit_cost_sources: dict
    bootstrap: tuple = ()
    batch_runs: tuple = ()
    description: str = ""
    created: str = ""
    threads: int = 1
    source: str = ""
    schema: str = SCHEMA
    ring_factors: tuple = ()

    def to_json(self) -> dict:
        return {
            "schema": self.schema, "cpu_model": self.cpu_model, "simd_path": self.simd_path, "threads": self.threads,
            "created": self.created, "description": self.description,
            "unit_costs": {k: {"seconds": self.unit_costs[k], "source": self.unit_cost_sources.get(k, "")}
                           for k in UNIT_COSTS},
            "bootstrap": [dict(vars(m)) for m in self.bootstrap],
            "batch_runs": [dict(vars(r), rho={str(k): v for k, v in r.rho.items()},
                                key_bytes={str(k): v for k, v in r.key_bytes.items()},
                                bits={str(k): list(v) for k, v in r.bits.items()}) for r in self.batch_runs],
            "ring_factors": [dict(vars(r)) for r in self.ring_factors],
        }

    @classmethod
    def from_json(cls, d, origin: str = "the profile") -> "CostProfile":
        """A validated profile; SerializationError naming `origin` and the fix for anything else."""
        if not isinstance(d, dict):
            raise SerializationError(f"cost profile {origin} is not a JSON object: {FIX}")
        if d.get("schema") not in (SCHEMA, SCHEMA_V2):
            raise SerializationError(f"cost profile {origin} has schema {d.get('schema')!r}; this hemlp reads "
                                     f"{SCHEMA!r}: {FIX}")
        try:
            units = d["unit_costs"]
            costs = {k: _positive(units[k]["seconds"], f"unit_costs.{k}") for k in UNIT_COSTS}
            sources = {k: str(units[k].get("source", "")) for k in UNIT_COSTS}
            if d["schema"] == SCHEMA_V2:
                for k, f in v2_keyswitch_factors().items():
                    costs[k] *= f
                    sources[k] += f" [schema /2's figure per N x limbs x {f:.4g}: per N x key-switch units]"
            boots = tuple(BootMeasurement(
                str(m["preset"]), int(m["N"]), int(m["max_level"]), int(m["threads"]),
                _positive(m["seconds"], "bootstrap.seconds"), _optional(m.get("pair_seconds"), "pair_seconds"),
                None if m.get("precision_bits") is None else float(m["precision_bits"]), str(m["source"]))
                for m in d["bootstrap"])
            runs = tuple(BatchRun(
                str(r["name"]), str(r["preset"]), int(r["N"]), int(r["threads"]), str(r.get("date", "")),
                {int(k): _positive(v, "batch_runs.rho") for k, v in r["rho"].items()},
                {int(k): int(v) for k, v in r["key_bytes"].items()}, int(r["single_key_bytes"]),
                {int(k): (float(v[0]), float(v[1])) for k, v in r.get("bits", {}).items()}, str(r.get("derived", "")))
                for r in d["batch_runs"])
            simd = str(d["simd_path"])
            if simd not in SIMD_ORDER:
                raise ValueError(f"simd_path {simd!r} is not one of {', '.join(SIMD_ORDER)}")
            rings = tuple(RingFactors(int(r["N"]), {str(k): _positive(v, f"ring_factors.{k}")
                                                    for k, v in r["factors"].items() if k in UNIT_COSTS},
                                      str(r["source"])) for r in d.get("ring_factors", []))
            return cls(str(d["cpu_model"]), simd, costs, sources, boots, runs, str(d.get("description", "")),
                       str(d.get("created", "")), int(d.get("threads", 1)), ring_factors=rings)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise SerializationError(f"cost profile {origin} is not a valid {SCHEMA} profile ({what}): "
                                     f"{FIX}") from None


def v2_keyswitch_factors() -> dict:
    """{unit cost: factor} that turns a schema /2 profile's key-switching costs (seconds per N x limbs) into /3's
    (per N x key-switch units): exact, every /2 figure was measured at N14-d6's fresh level (7 limbs, 2 special
    primes, digits of 2; the hoisted one as one of 8), so a /2 profile is read, not refused."""
    n14 = SimpleNamespace(N=2 ** 14, p=(60, 60), alpha=2)
    ks = keyswitch_units(n14, 6)
    return {"rotate": 7 / ks, "ct_mul": 7 / ks, "rotate_hoisted": 7 / hoisted_units(n14, 6, 8)}


def _positive(v, what: str) -> float:
    x = float(v)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{what} = {v!r} is not a positive number of seconds")
    return x


def _optional(v, what: str) -> Optional[float]:
    return None if v is None else _positive(v, what)


# ---------------------------------------------------------------------------------------
# Files: packaged tables, the user's calibrated profiles
# ---------------------------------------------------------------------------------------

def load_profile(path, origin: Optional[str] = None) -> CostProfile:
    """The profile in a JSON file (SerializationError naming the file and the fix when it cannot be read)."""
    path = Path(path)
    origin = origin or str(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SerializationError(f"cost profile {origin} cannot be read ({exc.strerror or exc}): {FIX}") from None
    except ValueError as exc:
        raise SerializationError(f"cost profile {origin} is not JSON ({exc}): it is corrupted; {FIX}") from None
    return CostProfile.from_json(data, origin)


def save_profile(profile: CostProfile, path) -> Path:
    """Write `profile` to `path` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(profile.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return path


def packaged_paths() -> list[str]:
    """The SIMD paths with a packaged table, in SIMD_ORDER."""
    return [p for p in SIMD_ORDER if (TABLES / f"{p}.json").is_file()]


def packaged_profile(simd_path: str) -> CostProfile:
    """The packaged table of `simd_path` (ParameterError naming the tables there are when it has none)."""
    if simd_path not in packaged_paths():
        raise ParameterError(f"no packaged cost table for SIMD path {simd_path!r}; packaged: "
                             f"{', '.join(packaged_paths()) or 'none (a broken install: reinstall hemlp)'}")
    p = load_profile(TABLES / f"{simd_path}.json", origin=f"packaged table {simd_path} ({TABLES / simd_path}.json)")
    return replace(p, source=f"packaged table {simd_path}")


def cache_dir() -> Path:
    """The user cache directory: $HEMLP_CACHE_DIR, else $XDG_CACHE_HOME/hemlp, else ~/.cache/hemlp."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "hemlp"
    return Path.home() / ".cache" / "hemlp"


def user_profile_path(cpu_model: str, simd_path: str, cache: Optional[Path] = None) -> Path:
    """Where `hemlp calibrate` keeps the profile of a (CPU model, SIMD path)."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_model.lower()).strip("-") or "cpu"
    return (cache_dir() if cache is None else Path(cache)) / "cost_profiles" / f"{slug}__{simd_path}.json"


# ---------------------------------------------------------------------------------------
# The active profile
# ---------------------------------------------------------------------------------------

def active_profile(simd_path: Optional[str] = None, cpu_model: Optional[str] = None) -> CostProfile:
    """The profile the planner uses now (see the module doc for the order); cached until reset_profile_cache().
    simd_path / cpu_model: this machine's (hemlp.machine) unless given."""
    if simd_path is None or cpu_model is None:
        from hemlp import machine

        simd_path = simd_path or machine.simd_path()
        cpu_model = cpu_model or machine.cpu_model()
    return _resolve(os.environ.get(PROFILE_ENV, "").strip(), str(cache_dir()), cpu_model, simd_path)


def reset_profile_cache() -> None:
    """Forget the cached active profile (after writing a profile, or in tests that change the environment)."""
    _resolve.cache_clear()


@lru_cache(maxsize=8)
def _resolve(pin: str, cache: str, cpu_model: str, simd_path: str) -> CostProfile:
    if pin and pin != "auto":
        if pin.startswith("packaged:"):
            return replace(packaged_profile(pin.split(":", 1)[1]),
                           source=f"packaged table {pin.split(':', 1)[1]} ({PROFILE_ENV}={pin})")
        if not Path(pin).expanduser().is_file():
            raise ParameterError(f"{PROFILE_ENV}={pin!r} is neither packaged:<{'|'.join(packaged_paths())}> nor a "
                                 "profile file; unset it (or set it to 'auto') to use this machine's profile")
        p = load_profile(Path(pin).expanduser())
        return replace(p, source=f"{pin} ({PROFILE_ENV}; {p.cpu_model}, {p.simd_path})")
    user = user_profile_path(cpu_model, simd_path, Path(cache))
    if user.is_file():
        p = load_profile(user)
        if (p.cpu_model, p.simd_path) != (cpu_model, simd_path):
            raise SerializationError(f"cost profile {user} is for {p.cpu_model} / {p.simd_path}, not this machine's "
                                     f"{cpu_model} / {simd_path}: {FIX}")
        return replace(p, source=f"calibrated {p.created[:10]} for {cpu_model}, {simd_path} ({user})")
    table = packaged_for(simd_path)
    if table.simd_path == simd_path:
        return replace(table, source=f"{table.source} (not calibrated on this {cpu_model}: `hemlp calibrate`)")
    return replace(table, source=f"{table.source}, the nearest to this machine's SIMD path {simd_path} (not "
                                 "calibrated: `hemlp calibrate`)")


def packaged_for(simd_path: str) -> CostProfile:
    """The packaged table of `simd_path`, else of the nearest SIMD path that has one (a slower one on a tie: its
    estimates err on the safe side)."""
    have = packaged_paths()
    if not have:
        raise ParameterError(f"no packaged cost table in {TABLES}: a broken install, reinstall hemlp (or run "
                             "`hemlp calibrate` and set HEMLP_COST_PROFILE to the file it writes)")
    if simd_path in have:
        return packaged_profile(simd_path)
    rank = {p: i for i, p in enumerate(SIMD_ORDER)}
    near = min(have, key=lambda p: (abs(rank[p] - rank.get(simd_path, len(SIMD_ORDER))), -rank[p]))
    return packaged_profile(near)
