"""CKKS bootstrapping on hemlp.fhe (layered as Lattigo's ckks -> bootstrapping).

Built on the building blocks of hemlp.he (special_fft, reinterpret, subring, dft: the homomorphic
CoeffToSlot / SlotToCoeff; polynomial: BSGS polynomial evaluation):
- evalmod: EvalMod (Han–Ki cosine + double angles, native polynomial evaluation);
- params: BootParams (order, message ratio, EvalMod shape, DFT depths, sparse-secret weight);
- modraise: ScaleDown, sparse-secret encapsulation and ModRaise (native, csrc/boot/modraise);
- keys: client-side generation of exactly the keys one bootstrapper needs, at their levels;
- bootstrapper: Bootstrapper.bootstrap / bootstrap_pair;
- batch: batched bootstrapping on shared-a MSRLWE ciphertexts (BatchBootstrapper.bootstrap_batch, CtS-first);
- batch_keys: its keys (BatchBootstrapKeys: seeded a-parts, save / load) and their memory (estimate_bytes, choose_k);
- mambo: the S2C-first order, batched, and MaMBo (MamboBootstrapper.pcmm_bootstrap: PCMM fused at the bottom).
"""
from hemlp.bootstrap import evalmod
from hemlp.bootstrap.bootstrapper import Bootstrapper, max_coefficient, slot_coefficients
from hemlp.bootstrap.evalmod import EvalModParams, eval_mod
from hemlp.bootstrap.keys import BootstrapKeys
from hemlp.bootstrap.modraise import EncapsulationKeys, dense_to_sparse, mod_raise, scale_down
from hemlp.bootstrap.params import BootParams
from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
from hemlp.bootstrap.mambo import MamboBootstrapper

__all__ = ["evalmod", "EvalModParams", "eval_mod", "BootParams", "BootstrapKeys", "Bootstrapper",
           "EncapsulationKeys", "dense_to_sparse", "mod_raise", "scale_down", "slot_coefficients", "max_coefficient",
           "BatchBootstrapKeys", "BatchBootstrapper", "MamboBootstrapper"]
