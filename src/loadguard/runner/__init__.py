"""The reference harness: an audited Hugging Face runner, the differential compare, and the NaN trace."""

from .differential import eager_load
from .hf_runner import HfRunner
from .trace import TraceResult, trace

__all__ = ["HfRunner", "TraceResult", "eager_load", "trace"]

BUILT_IN_PROMPTS = ("describe what you see .", "what do you see ?", "the image shows a")


def default_cases(folder) -> tuple[list[str], list[list] | None]:
    """Prompts (and images per prompt) to compare a model on: its zoo entry's demo cases, or a built-in set.

    Each ``<image>`` placeholder of a zoo prompt takes the next demo image.
    """
    from .. import zoo

    entry = zoo.entry_of(folder)
    if entry is None:
        return list(BUILT_IN_PROMPTS), None
    if not entry.image_sizes:
        return list(entry.prompts), None
    images = zoo.demo_images(entry.image_sizes)
    prompts, per_prompt = [], []
    for prompt in entry.prompts:  # each prompt with every run of its image count through the demo images
        count = prompt.count("<image>")
        for start in range(0, len(images) - count + 1, max(count, 1)):
            prompts.append(prompt)
            per_prompt.append(images[start : start + count])
    return prompts, per_prompt


__all__ += ["BUILT_IN_PROMPTS", "default_cases"]
