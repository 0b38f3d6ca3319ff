"""Scripts that run ON the nodes. Nodes have only sshd, python3 (stdlib) and coreutils, so every module
here is stdlib-only, imports nothing from labkit, and is sent as the argument of `python3 -I -S -c SCRIPT OP
REQUEST_JSON` (not on stdin: fabric feeds stdin one byte at a time)."""
