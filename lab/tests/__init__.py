"""Tests of the lab helpers and the netns end-to-end suite of the multihome tunnel."""
