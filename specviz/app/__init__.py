"""The app's choices turned into runs: menus and defaults, hosting limits, replay, input parsing."""
