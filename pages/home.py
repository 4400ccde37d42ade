"""Home: what the lab is and a suggested path through it."""

from ui.page import header

header("home")
