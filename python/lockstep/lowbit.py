"""Packed low-bit weights in Python: lockstep's form of document 003's ``lowbit`` module.

One packed format is defined, ``"q8"`` (docs/FORMAT.md, "Packed weights"): a matrix W [K, N] is
stored as int8 values q [K, N] and one float32 scale per column [N], and stands for the float32
matrix ``float(q[k, n]) * scale[n]`` (one rounded multiply each). ``q4`` is not defined yet: its
layout belongs to the packed-weight issue, and asking for it raises ValueError until then.

- ``pack(w)``: a float32 matrix packed exactly as ``lockstep export --pack q8`` packs it (the
  same C++ function does it, so the bytes are the export's).
- ``expand(packed)``: the float32 matrix it stands for, bit for bit what loading the packed file
  computes.
- ``read_packed(path)``: the tensors of a packed model directory (one ``export --pack q8``
  wrote), by registry name: a ``PackedTensor`` per matrix, a float32 array per vector, after
  every check loading makes.
- ``format_of(params)``: the format a named-parameter dict's matrices share.

A dict holding ``PackedTensor`` matrices may be given to ``LanguageModelInference`` and
``LanguageModelHostTrainer``: they are expanded exactly at construction and ``weight_format``
reports ``"q8"``. Either every matrix of the dict is packed (in one format) or none is; a mix is
refused with a ValueError naming them, since the result would be neither format.

Needs the compiled module (``lockstep._lockstep``); importing this module without it raises
ImportError.
"""

from ._lockstep import PackedTensor
from ._lockstep import lowbit_expand as expand
from ._lockstep import lowbit_pack as pack
from ._lockstep import lowbit_read_packed as read_packed

#: The packed formats lockstep defines.
FORMATS = ("q8",)

__all__ = ["FORMATS", "PackedTensor", "expand", "format_of", "pack", "read_packed"]


def format_of(params):
    """``"float32"`` when no value of the dict is packed, the shared format when every matrix
    (every value of two dimensions) is, and ValueError naming them when the dict mixes them."""
    packed = {name: value.format for name, value in params.items() if isinstance(value, PackedTensor)}
    if not packed:
        return "float32"
    formats = sorted(set(packed.values()))
    if len(formats) > 1:
        raise ValueError("the packed parameters mix formats " + " and ".join(formats) + ": " +
                         ", ".join(f"{n} ({f})" for n, f in packed.items()))
    plain = [name for name, value in params.items()
             if not isinstance(value, PackedTensor) and getattr(value, "ndim", None) == 2]
    if plain:
        raise ValueError("the parameter matrices mix formats: packed " + ", ".join(packed) +
                         "; float32 " + ", ".join(plain))
    return formats[0]
