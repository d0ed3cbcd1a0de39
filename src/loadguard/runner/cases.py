"""What a reference run compares a model on: its zoo entry's demo prompts and images, or a built-in set."""

from __future__ import annotations

from .. import zoo

BUILT_IN_PROMPTS = ("describe what you see .", "what do you see ?", "the image shows a")


def default_cases(folder) -> tuple[list[str], list[list] | None]:
    """Prompts (and images per prompt) to compare a model on: its zoo entry's demo cases, or a built-in set.

    Each ``<image>`` placeholder of a zoo prompt takes the next demo image.
    """
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


__all__ = ["BUILT_IN_PROMPTS", "default_cases"]
