// Package metasync keeps a mirror's destination metadata following its
// source, on every refresh of the instance that owns the mirror:
//
//   - topic configs (configs.go): each mirror topic's dynamic configs on the
//     destination are set to the source's and the ones the source no longer
//     sets are deleted, except configs the mirror never copies (its
//     topic.properties.exclude, the defaults of mirrorconfig.DefaultExcludedConfig
//     and the configs the mirror forces, mirrorconfig.ForcedTopicConfigs);
//   - ACLs (acls.go): source ACLs that acls.include selects are created on the
//     destination when missing. Destination ACLs are never deleted, so the
//     destination's own grants survive; an ACL deleted on the source stays on
//     the destination until its operator deletes it.
//
// Partition counts are kept in step by the topics job, apis.Backend.RefreshTopics (grown mirror
// topics get new partitions, which prepare and mirror like the others).
package metasync
