"""analysis/pipeline"""
