"""The channels shipped with askq. Each is an `askq.Answerer` found through the
`askq.answerers` entry-point group, as a third-party channel would be."""
