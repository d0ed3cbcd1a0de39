"""The attention-mask helpers of ``transformers.modeling_attn_mask_utils`` (transformers 4.x, removed in 5),
written again for the ``v4-attn-mask-utils`` workaround, with the 4.x semantics.

Masks are additive: 0 where a position may be attended, the dtype's most negative value where it may not;
4D masks have the shape ``(batch, 1, query_length, key_value_length)``. ``tests/workarounds/test_transformers_v4.py``
compares every function here with transformers 4.57's own on a grid of inputs (``make test-compat``).
"""

from __future__ import annotations

import torch


def _compiling() -> bool:
    return bool(torch.compiler.is_compiling())


def _tracing(tensor) -> bool:
    return torch.jit.is_tracing() or isinstance(tensor, torch.fx.Proxy) or _compiling()


class AttentionMaskConverter:
    """Builds causal (optionally sliding-window) and padding masks; ``is_causal`` picks uni- or bi-directional."""

    def __init__(self, is_causal: bool, sliding_window: int | None = None):
        if sliding_window is not None and sliding_window <= 0:
            raise ValueError(
                f"Make sure that when passing `sliding_window` that its value is a strictly positive integer, not `{sliding_window}`"
            )
        self.is_causal = is_causal
        self.sliding_window = sliding_window

    def __repr__(self) -> str:
        return f"AttentionMaskConverter(is_causal={self.is_causal}, sliding_window={self.sliding_window})"

    def __eq__(self, other) -> bool:
        return isinstance(other, AttentionMaskConverter) and (self.is_causal, self.sliding_window) == (
            other.is_causal,
            other.sliding_window,
        )

    def to_causal_4d(
        self, batch_size: int, query_length: int, key_value_length: int, dtype: torch.dtype, device="cpu"
    ):
        """The causal mask alone, or None for a single query position without a sliding window."""
        if not self.is_causal:
            raise ValueError(f"Please use `to_causal_4d` only if {self.__class__} has `is_causal` set to True.")
        if query_length <= 1 and self.sliding_window is None:
            return None
        return self._make_causal_mask(
            (batch_size, query_length), dtype, device, key_value_length - query_length, self.sliding_window
        )

    def to_4d(
        self,
        attention_mask_2d: torch.Tensor,
        query_length: int,
        dtype: torch.dtype,
        key_value_length: int | None = None,
    ) -> torch.Tensor:
        """A (batch, key_value_length) 0/1 padding mask as a 4D additive mask, the causal mask added when causal."""
        batch = attention_mask_2d.shape[0]
        causal = None
        if self.is_causal and (query_length > 1 or self.sliding_window is not None):
            if key_value_length is None:
                raise ValueError(
                    "This attention mask converter is causal. Make sure to pass `key_value_length` to correctly create a causal mask."
                )
            causal = self._make_causal_mask(
                (batch, query_length),
                dtype,
                attention_mask_2d.device,
                key_value_length - query_length,
                self.sliding_window,
            )
        elif self.sliding_window is not None:
            raise NotImplementedError("Sliding window is currently only implemented for causal masking")
        padding = self._expand_mask(attention_mask_2d, dtype, tgt_len=query_length).to(attention_mask_2d.device)
        if causal is None:
            return padding
        return causal.masked_fill(padding.bool(), torch.finfo(dtype).min)

    @staticmethod
    def _make_causal_mask(
        input_ids_shape, dtype: torch.dtype, device, past_key_values_length: int = 0, sliding_window: int | None = None
    ):
        batch, length = input_ids_shape
        lowest = torch.finfo(dtype).min
        rows = torch.arange(length, device=device)[:, None]
        columns = torch.arange(length + past_key_values_length, device=device)[None, :]
        blocked = columns > rows + past_key_values_length  # the future
        if sliding_window is not None:  # and what lies further back than the window
            blocked = blocked | (columns - rows <= past_key_values_length - sliding_window - 1)
        mask = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, lowest)
        return mask[None, None].expand(batch, 1, length, length + past_key_values_length)

    @staticmethod
    def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: int | None = None) -> torch.Tensor:
        batch, source_length = mask.shape
        target_length = source_length if tgt_len is None else tgt_len
        expanded = mask[:, None, None, :].expand(batch, 1, target_length, source_length).to(dtype)
        inverted = 1.0 - expanded
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)

    @staticmethod
    def _unmask_unattended(expanded_mask: torch.Tensor, min_dtype: float) -> torch.Tensor:
        """Rows that attend to nothing (left padding) attend to everything instead (an SDPA kernel needs it)."""
        if expanded_mask.dtype == torch.bool:
            raise ValueError(
                "AttentionMaskConverter._unmask_unattended expects a float `expanded_mask`, got a BoolTensor."
            )
        fully_masked = torch.all(expanded_mask == min_dtype, dim=-1, keepdim=True)
        return expanded_mask.mul(~fully_masked)

    @staticmethod
    def _ignore_causal_mask_sdpa(
        attention_mask,
        inputs_embeds,
        past_key_values_length: int,
        sliding_window: int | None = None,
        is_training: bool = False,
    ) -> bool:
        """Whether SDPA's own ``is_causal`` can stand in for the mask (no padding, square or single query)."""
        query_length = inputs_embeds.shape[1]
        key_value_length = query_length + past_key_values_length
        tracing = _tracing(inputs_embeds)
        square_or_single = query_length == 1 or key_value_length == query_length
        within_window = sliding_window is None or key_value_length < sliding_window
        if attention_mask is None:
            return bool((is_training or not tracing) and square_or_single and within_window)
        if not within_window or attention_mask.dim() == 4:
            return False
        return bool(not tracing and torch.all(attention_mask == 1) and square_or_single)


def _prepare_4d_causal_attention_mask(
    attention_mask,
    input_shape,
    inputs_embeds: torch.Tensor,
    past_key_values_length: int,
    sliding_window: int | None = None,
):
    """Causal 4D additive mask from a 2D padding mask (or an inverted 4D 0/1 mask, or none)."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    key_value_length = input_shape[-1] + past_key_values_length
    dtype = inputs_embeds.dtype
    if attention_mask is not None and attention_mask.dim() == 2:
        return converter.to_4d(attention_mask, input_shape[-1], key_value_length=key_value_length, dtype=dtype)
    if attention_mask is not None and attention_mask.dim() == 4:
        expected = (input_shape[0], 1, input_shape[1], key_value_length)
        if tuple(attention_mask.shape) != expected:
            raise ValueError(
                f"Incorrect 4D attention_mask shape: {tuple(attention_mask.shape)}; expected: {expected}."
            )
        inverted = 1.0 - attention_mask
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
    return converter.to_causal_4d(
        input_shape[0], input_shape[-1], key_value_length, dtype=dtype, device=inputs_embeds.device
    )


def _prepare_4d_causal_attention_mask_for_sdpa(
    attention_mask,
    input_shape,
    inputs_embeds: torch.Tensor,
    past_key_values_length: int,
    sliding_window: int | None = None,
):
    """As :func:`_prepare_4d_causal_attention_mask`, or None where SDPA's ``is_causal`` does the same."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    key_value_length = input_shape[-1] + past_key_values_length
    dtype = inputs_embeds.dtype
    if AttentionMaskConverter._ignore_causal_mask_sdpa(
        attention_mask, inputs_embeds, past_key_values_length, sliding_window
    ):
        return None
    if attention_mask is None:
        return converter.to_causal_4d(
            input_shape[0], input_shape[-1], key_value_length, dtype=dtype, device=inputs_embeds.device
        )
    mask = (
        attention_mask
        if attention_mask.dim() == 4
        else converter.to_4d(attention_mask, input_shape[-1], dtype=dtype, key_value_length=key_value_length)
    )
    if not _tracing(inputs_embeds) and mask.device.type == "cuda":
        mask = AttentionMaskConverter._unmask_unattended(mask, min_dtype=torch.finfo(dtype).min)
    return mask


def _prepare_4d_attention_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: int | None = None) -> torch.Tensor:
    """Bi-directional 4D additive mask from a (batch, key_value_length) 0/1 padding mask."""
    return AttentionMaskConverter._expand_mask(mask=mask, dtype=dtype, tgt_len=tgt_len)


def _prepare_4d_attention_mask_for_sdpa(mask: torch.Tensor, dtype: torch.dtype, tgt_len: int | None = None):
    """As :func:`_prepare_4d_attention_mask`, or None when nothing is padded."""
    if not _tracing(mask) and torch.all(mask == 1):
        return None
    return AttentionMaskConverter._expand_mask(mask=mask, dtype=dtype, tgt_len=tgt_len)


def _create_4d_causal_attention_mask(
    input_shape, dtype: torch.dtype, device, past_key_values_length: int = 0, sliding_window: int | None = None
):
    """The causal 4D mask alone (None for a single query position without a sliding window)."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    return converter.to_causal_4d(
        input_shape[0], input_shape[-1], past_key_values_length + input_shape[-1], dtype=dtype, device=device
    )


NAMES = (
    "AttentionMaskConverter",
    "_create_4d_causal_attention_mask",
    "_prepare_4d_attention_mask",
    "_prepare_4d_attention_mask_for_sdpa",
    "_prepare_4d_causal_attention_mask",
    "_prepare_4d_causal_attention_mask_for_sdpa",
)
