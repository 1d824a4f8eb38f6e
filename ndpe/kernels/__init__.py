"""The fast paths of RoPE, apart from its formula (``ndpe.functional.rotate_reference``).

``ndpe.functional.apply_rotary_many`` is the one dispatch; :func:`ndpe.functional.set_rotary_kernel`
picks a path outside ``torch.compile``:

- :mod:`.eager` — PyTorch ops near the memory floor;
- :mod:`.compile` — the reference formula compiled by Inductor;
- :mod:`.triton` — ndpe's Triton kernel for CUDA (q and k in one launch, float32 angles);
- :mod:`.qkv` — the Triton kernel in place on a packed qkv buffer (``rotary_qkv_``, with its autograd);
- :mod:`.autograd` — the autograd Function of the eager and Triton paths (the backward is the inverse rotation);
- :mod:`.angles` — rotations by learned angles (``rope-mixed``): their cos/sin, and the rotation whose backward
  gives the frequencies' gradient from the inverse rotation of q's and k's (no cos/sin gradients).

Each is tested against the reference formula; none imports ``ndpe.functional``, and imports run one way:
angles -> autograd -> triton -> eager, qkv -> triton.
"""
