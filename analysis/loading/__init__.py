"""analysis/loading"""
