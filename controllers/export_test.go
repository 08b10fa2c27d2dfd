package controllers

// ChildVerbs are the verbs the manager needs on every child kind.
var ChildVerbs = childVerbs
