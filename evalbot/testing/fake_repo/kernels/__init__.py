"""The fake repo has a kernels package too, like the real one (the bot checks where it imports from)."""
