"""A toy encoder-decoder written for transformers 4.x, T5-style (a loadguard zoo model; remote code).

Its encoder and decoder embedding tables are the shared one: tied in ``__init__`` and again by ``_tie_weights``
(which 4.x's ``tie_weights`` called on every load), and listed in a 4.x-style ``_tied_weights_keys`` list, so
``save_pretrained`` leaves them out of the checkpoint. transformers 5 reads the list only through the
``v4-tied-weights-keys`` bridge, which ties nothing when ``tie_word_embeddings`` is off (the head is untied, as in
T5 v1.1): both tables come out of a load untied, holding random initialization, and no loading report says so.
Its positions table, a non-persistent buffer, comes out uninitialized as well.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.modeling_outputs import CausalLMOutput

from .configuration_lgv4s2s import LgV4S2SConfig
from .modeling_lgtoy import LgToyBlock, LgToyPositions, LgToyPreTrainedModel


class LgV4S2SStack(nn.Module):
    def __init__(self, config, shared: nn.Embedding):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight = shared.weight  # 4.x style: the shared table, tied at construction
        self.block = LgToyBlock(config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed_tokens(input_ids) + positions)


class LgV4S2SForCausalLM(LgToyPreTrainedModel, GenerationMixin):
    config_class = LgV4S2SConfig
    _tied_weights_keys = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = LgToyPositions(config)
        self.encoder = LgV4S2SStack(config, self.shared)
        self.decoder = LgV4S2SStack(config, self.shared)
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.logit_scale = None
        self.post_init()

    def _tie_weights(self):  # what transformers 4.x's tie_weights() called; transformers 5 never does
        self.encoder.embed_tokens.weight = self.shared.weight
        self.decoder.embed_tokens.weight = self.shared.weight

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value

    def get_output_embeddings(self):
        return self.lm_head

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs) -> CausalLMOutput:
        positions = self.positions(input_ids.shape[1]).to(self.shared.weight.dtype)
        encoded = self.encoder(input_ids, positions)
        decoded = self.decoder(input_ids, positions) + encoded
        return CausalLMOutput(logits=self.lm_head(self.norm(decoded)))
