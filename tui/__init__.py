"""The Textual TUI. Only this package imports textual."""
