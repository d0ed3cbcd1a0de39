"""Inputs per modality for proof (c): built from the forward's own names and the config's sizes, so a vision encoder,
an audio model or a time-series model is compared across releases instead of 'does not run on either release'."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from loadguard._hf import model_inputs, model_outputs


class _Config(PretrainedConfig):
    model_type = "lg_inputs_probe"


class _Base(PreTrainedModel):
    config_class = _Config

    def __init__(self, config):
        super().__init__(config)
        self.scale = nn.Linear(4, 4)
        self.post_init()

    def _init_weights(self, module):
        pass


class VisionOnly(_Base):
    """A background-removal-style encoder: images only, optional in the signature, no image size in its config."""

    def forward(self, pixel_values=None, return_dict=None):
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values")
        return BaseModelOutput(last_hidden_state=pixel_values.mean(dim=(2, 3)) @ self.scale.weight[:3, :3])


class Audio(_Base):
    def forward(self, input_values, attention_mask=None):
        frames = input_values.unfold(-1, 400, 320)  # a wav2vec2-style receptive field and stride
        return BaseModelOutput(last_hidden_state=frames[..., :4] @ self.scale.weight)


class LogMel(_Base):
    def forward(self, input_features):
        assert input_features.shape[-1] == 2 * self.config.max_source_positions, "Whisper expects 3000 frames"
        return BaseModelOutput(last_hidden_state=input_features[:, :4].transpose(1, 2) @ self.scale.weight)


class TimeSeries(_Base):
    def forward(self, past_values, past_time_features, past_observed_mask=None):
        needed = self.config.context_length + max(self.config.lags_sequence)
        if past_values.shape[1] != needed:
            raise ValueError(f"input length {past_values.shape[1]} and context+lags {needed} differ")
        observed = past_values * past_observed_mask
        summary = torch.stack([observed.mean(1), observed.std(1), past_time_features.sum((1, 2)), observed[:, -1]], 1)
        return BaseModelOutput(last_hidden_state=summary @ self.scale.weight)


class VisionLanguage(_Base):
    def forward(self, input_ids, pixel_values, attention_mask=None):
        return BaseModelOutput(last_hidden_state=pixel_values.mean())


def test_a_vision_encoder_without_an_image_size_gets_images():
    model = VisionOnly(_Config(num_channels=3)).eval()
    built, missing = model_inputs(model)
    assert missing == [] and sorted(built) == ["pixel_values"]
    assert tuple(built["pixel_values"].shape) == (2, 3, 224, 224)
    seen = model_outputs(model)
    assert seen["error"] is None and seen["values"] is not None and seen["inputs"] == ["pixel_values"]
    again = model_inputs(VisionOnly(_Config(image_size=[32, 48], num_channels=1)))[0]["pixel_values"]
    assert tuple(again.shape) == (2, 1, 32, 48)  # the config's own size and channels where it says them


def test_audio_and_log_mel_features_take_their_sizes_from_the_config():
    built, missing = model_inputs(Audio(_Config()))
    assert missing == [] and tuple(built["input_values"].shape) == (2, 3200)
    assert "input_ids" not in built and "attention_mask" not in built  # a waveform's mask is not a token mask
    assert model_outputs(Audio(_Config()).eval())["error"] is None
    whisper = LogMel(_Config(num_mel_bins=16, max_source_positions=50)).eval()
    assert tuple(model_inputs(whisper)[0]["input_features"].shape) == (2, 16, 100)
    seen = model_outputs(whisper)
    assert seen["error"] is None and seen["values"].shape == (2, 100, 4)


def test_a_time_series_gets_its_context_lags_features_and_mask():
    config = _Config(context_length=12, lags_sequence=[1, 2, 7], num_time_features=2, input_size=1)
    model = TimeSeries(config).eval()
    built, missing = model_inputs(model)
    assert missing == []
    assert tuple(built["past_values"].shape) == (2, 19)
    assert tuple(built["past_time_features"].shape) == (2, 19, 2)
    assert torch.equal(built["past_observed_mask"], torch.ones(2, 19))
    first, second = model_outputs(model), model_outputs(model)
    assert first["error"] is None and torch.equal(first["values"], second["values"])  # seeded: the same every run
    channels = model_inputs(TimeSeries(_Config(context_length=5, lags_sequence=[1], input_size=3)))[0]
    assert tuple(channels["past_values"].shape) == (2, 6, 3)


def test_a_vision_language_model_without_an_image_size_still_says_what_is_missing():
    """Its images need the size its processor makes: not guessed; its text part is what runs (see model_outputs)."""
    built, missing = model_inputs(VisionLanguage(_Config()))
    assert missing == ["pixel_values"] and "input_ids" in built
    built, missing = model_inputs(VisionLanguage(_Config(image_size=16)))
    assert missing == [] and tuple(built["pixel_values"].shape) == (2, 3, 16, 16)
