"""What the sandbox's imitations share (a checkout's only: no release ships it, nor any
provider folder's ``sandbox/``; docs/installation.md#the-sandbox): the sandbox's
:class:`~mailbus.providers.sandbox.dialect.Dialect` each imitation subclasses, and the
events' :class:`~mailbus.providers.sandbox.events.Signer`. No provider; the registry
passes it by."""
