"""The built-in toy world: synthetic grounded tasks, their writer, and a tiny
Qwen-VL target trained on them (see ``docs/world.md``)."""
