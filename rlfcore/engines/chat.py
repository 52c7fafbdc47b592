CHAT_ENGINES = ("openai-chat",)
