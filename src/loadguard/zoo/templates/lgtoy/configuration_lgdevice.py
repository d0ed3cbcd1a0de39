"""Configuration of a toy LM whose code picks its own device (a loadguard zoo model; remote code)."""

from .configuration_lgtoy import LgToyConfig


class LgDeviceConfig(LgToyConfig):
    model_type = "lgdevice"

    def __init__(self, init_device: str = "cpu", **kwargs):  # its own __init__: a dataclass without the toy's fields otherwise
        self.init_device = init_device
        super().__init__(**kwargs)
