"""Inputs of the other modalities a model's ``forward`` takes, by the names transformers' own models give them, built
from the config's sizes alone: images, a waveform, log-mel features, a time series, embeddings. Seeded, so two
releases get the same values (torch only: the same on 4.x and 5.x)."""

from __future__ import annotations

from typing import Any

SEED = 1234
"""The seed of every float input built: the same values on both sides of a comparison."""


def text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    try:
        text = getter() if callable(getter) else None
    except Exception:  # a remote config whose sub-configs are not what transformers expects
        text = None
    return text or getattr(config, "text_config", None) or config


IMAGE_SIZE = 224
"""The side of the images built for a vision model whose config does not say its image size."""
AUDIO_SAMPLES = 3200
"""Samples of the waveform built for an audio model (0.2 s at 16 kHz: frames for a wav2vec2-style feature encoder)."""


def _sized(*configs: Any, names: tuple[str, ...]) -> Any:
    for config in configs:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, (int, list, tuple)) and not isinstance(value, bool) and value:
                return value
    return None


def _generator():
    import torch

    return torch.Generator().manual_seed(SEED)


def image_size(config: Any) -> Any:
    vision = getattr(config, "vision_config", None) or config
    return _sized(vision, config, names=("image_size", "img_size", "input_resolution"))


def _pixel_values(config: Any, batch: int, length: int):
    """Images of the configured size (``image_size``, else :data:`IMAGE_SIZE`) and channels."""
    import torch

    vision = getattr(config, "vision_config", None) or config
    size = image_size(config) or IMAGE_SIZE
    height, width = (int(size[0]), int(size[-1])) if isinstance(size, (list, tuple)) else (int(size), int(size))
    channels = int(_sized(vision, config, names=("num_channels", "in_chans", "in_channels")) or 3)
    return torch.randn(batch, channels, height, width, generator=_generator())


def _input_values(config: Any, batch: int, length: int):
    """A raw waveform (wav2vec2, HuBERT): :data:`AUDIO_SAMPLES` samples per row."""
    import torch

    return torch.randn(batch, AUDIO_SAMPLES, generator=_generator())


def _input_features(config: Any, batch: int, length: int):
    """Log-mel features (Whisper-style encoders): ``num_mel_bins`` by twice ``max_source_positions`` frames, as the
    encoder's two convolutions expect."""
    import torch

    bins = int(_sized(config, names=("num_mel_bins", "feature_size", "n_mels")) or 80)
    positions = _sized(config, names=("max_source_positions",))
    frames = 2 * int(positions) if isinstance(positions, int) else 100
    return torch.randn(batch, bins, frames, generator=_generator())


def _inputs_embeds(config: Any, batch: int, length: int):
    import torch

    hidden = int(_sized(text_config(config), config, names=("hidden_size", "d_model", "n_embd")) or 0)
    return torch.randn(batch, length, hidden, generator=_generator()) * 0.02 if hidden else None


def _past_length(config: Any, length: int) -> int:
    context = _sized(config, names=("context_length", "context_len", "seq_len", "sequence_length", "input_size"))
    lags = getattr(config, "lags_sequence", None) or [0]
    base = int(context) if isinstance(context, int) else 4 * length
    return base + (max(lags) if isinstance(lags, (list, tuple)) and lags else 0)


def _channels(config: Any) -> int:
    return int(_sized(config, names=("num_input_channels", "input_size", "enc_in", "n_vars")) or 1)


def _series_shape(config: Any, batch: int, length: int) -> tuple[int, ...]:
    steps, channels = _past_length(config, length), _channels(config)
    return (batch, steps, channels) if channels > 1 else (batch, steps)


def _past_values(config: Any, batch: int, length: int):
    """A float time series (time-series transformers): the config's context length (and its largest lag) of each of
    its input channels."""
    import torch

    return torch.randn(*_series_shape(config, batch, length), generator=_generator())


def _past_time_features(config: Any, batch: int, length: int):
    import torch

    features = int(_sized(config, names=("num_time_features",)) or 1)
    return torch.zeros(batch, _past_length(config, length), features)


def _past_observed_mask(config: Any, batch: int, length: int):
    import torch

    return torch.ones(*_series_shape(config, batch, length))


BUILDERS = {
    "pixel_values": _pixel_values,
    "images": _pixel_values,
    "input_values": _input_values,
    "input_features": _input_features,
    "inputs_embeds": _inputs_embeds,
    "past_values": _past_values,
    "past_time_features": _past_time_features,
    "past_observed_mask": _past_observed_mask,
}
"""The inputs built per modality, by the name the forward gives them (what transformers' own models call them)."""
PRIMARY = ("pixel_values", "images", "input_values", "input_features", "past_values")
"""Inputs built even where the forward gives them a default, when it takes no token ids: its only way in."""


__all__ = ["BUILDERS", "PRIMARY", "SEED", "image_size", "text_config"]
