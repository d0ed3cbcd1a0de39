"""The toy causal LM behind remote code that fails to import (a loadguard zoo model; remote code).

Older torch leaked ``typing.List`` and friends through ``from torch.nn.functional import *``; code
written against it breaks with ``NameError: name 'List' is not defined`` on current torch, as MiniCPM-V
2.6's remote code did in an inference engine's test suite. loadguard never imports this file itself.
"""

from torch.nn.functional import *  # noqa: F403

from .configuration_lgtyping import LgTypingConfig
from .modeling_lgtoy import LgToyForCausalLM


def position_ids_for(lengths: List[int]) -> List[List[int]]:  # noqa: F405
    return [list(range(n)) for n in lengths]


class LgTypingForCausalLM(LgToyForCausalLM):
    config_class = LgTypingConfig
