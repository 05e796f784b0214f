"""The providers, one folder each: everything mailbus knows about one provider."""
