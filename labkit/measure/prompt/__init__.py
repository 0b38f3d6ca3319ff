"""What the requests say: unique prompts of an exact length in server tokens (prompts, counted by tokencount),
the pinned prompt corpus of corpus/ (corpus), an agentic session's messages (conversation) and a context-depth
request's context (context).
"""
