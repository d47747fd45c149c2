"""analysis/core"""
