package apis

// ListTopics lets the tests list a cluster's topics the way the handlers do
// (fresh metadata, not kgo's cache).
var ListTopics = listTopics
