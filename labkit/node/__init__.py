"""Scripts that run ON the nodes. Nodes have only sshd, python3 (stdlib) and coreutils, so every module
here is stdlib-only, imports nothing from labkit, and is sent as `python3 - OP REQUEST_JSON` with the
script text on stdin."""
