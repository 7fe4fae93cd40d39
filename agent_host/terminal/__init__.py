"""The terminal: the console (prompts, cards, streamed answers) and its one stdin reader."""
