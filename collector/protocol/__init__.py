"""collector/protocol"""
