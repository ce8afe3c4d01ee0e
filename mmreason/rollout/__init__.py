"""Rollouts: prompt building, batched generation, multi-turn episodes against an environment, forward passes."""
